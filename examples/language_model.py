"""A word-level language model in the manner of pytorch/examples' word_language_model: the
corpus is one tensor of word ids in memory, cut into `bptt`-long slices (no DataLoader), an
LSTM trained with plain SGD whose learning rate falls when the validation loss stops
improving. Runs on a text file, or on a small corpus it writes itself.

    python examples/language_model.py --epochs 2   # alone, or under `stoker submit -- python ...`
"""

import argparse
import math
from pathlib import Path

import torch
from torch import nn

import stoker

parser = argparse.ArgumentParser(description="a small LSTM language model")
parser.add_argument("--text", type=Path, default=None, help="a text file [a made-up corpus]")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--bptt", type=int, default=16, help="sequence length")
parser.add_argument("--lr", type=float, default=5.0)
parser.add_argument("--save", type=Path, default=Path("model.pt"))
args = parser.parse_args()
torch.manual_seed(1111)
job = stoker.init()

if args.text is not None:
    words = args.text.read_text().split()
else:
    words = [f"w{(i * 7 + i // 5) % 50}" for i in range(6000)]  # a corpus with a pattern
vocabulary = {word: index for index, word in enumerate(dict.fromkeys(words))}
ids = torch.tensor([vocabulary[word] for word in words])
split = len(ids) * 9 // 10


def batchify(data: torch.Tensor, batch_size: int) -> torch.Tensor:
    rows = data.size(0) // batch_size
    return data[: rows * batch_size].view(batch_size, -1).t().contiguous()


train_data, val_data = batchify(ids[:split], args.batch_size), batchify(ids[split:], 4)


class Model(nn.Module):
    def __init__(self, tokens: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(tokens, 32)
        self.rnn = nn.LSTM(32, 64)
        self.out = nn.Linear(64, tokens)

    def forward(
        self, x: torch.Tensor, hidden: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        output, hidden = self.rnn(self.embed(x), hidden)
        return self.out(output).view(-1, self.out.out_features), hidden


model = Model(len(vocabulary))
criterion = nn.CrossEntropyLoss()


def get_batch(source: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    length = min(args.bptt, len(source) - 1 - i)
    return source[i : i + length], source[i + 1 : i + 1 + length].reshape(-1)


def evaluate(source: torch.Tensor) -> float:
    model.eval()
    total, hidden = 0.0, None
    with torch.no_grad():
        for i in range(0, source.size(0) - 1, args.bptt):
            data, targets = get_batch(source, i)
            output, hidden = model(data, hidden)
            total += len(data) * criterion(output, targets).item()
    return total / (len(source) - 1)


def train(lr: float) -> None:
    model.train()
    hidden = None
    for batch in job.steps(len(range(0, train_data.size(0) - 1, args.bptt))):
        i = batch * args.bptt
        data, targets = get_batch(train_data, i)
        if hidden is not None:
            hidden = (hidden[0].detach(), hidden[1].detach())
        model.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            assert p.grad is not None
            p.data.add_(p.grad, alpha=-lr)
        if batch % 20 == 0:
            print(f"| epoch {epoch} | batch {batch} | lr {lr:.2f} | loss {loss.item():.2f}")


job.track(model=model, lr=args.lr, best_val_loss=None)
lr, best_val_loss = job.state["lr"], job.state["best_val_loss"]
for epoch in (e + 1 for e in job.epochs(args.epochs)):
    train(lr)
    val_loss = evaluate(val_data)
    print(f"| end of epoch {epoch} | valid loss {val_loss:.2f} | ppl {math.exp(val_loss):.1f}")
    if best_val_loss is None or val_loss < best_val_loss:
        torch.save(model.state_dict(), args.save)
        best_val_loss = val_loss
    else:
        lr /= 4.0
    job.track(lr=lr, best_val_loss=best_val_loss)
