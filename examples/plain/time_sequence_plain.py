"""Sine waves predicted by two LSTM cells, in the manner of pytorch/examples'
time_sequence_prediction: all the data in memory, one LBFGS step over all of it at a time
(no DataLoader, no batches), and a test loss after each step.

    python examples/plain/time_sequence_plain.py --steps 4
"""

import argparse

import torch
from torch import nn


class Sequence(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, 24)
        self.lstm2 = nn.LSTMCell(24, 24)
        self.linear = nn.Linear(24, 1)

    def forward(self, x: torch.Tensor, future: int = 0) -> torch.Tensor:
        h1 = c1 = torch.zeros(x.size(0), 24, dtype=torch.double)
        h2 = c2 = torch.zeros(x.size(0), 24, dtype=torch.double)
        outputs = []
        for x_t in torch.split(x, 1, dim=1):
            h1, c1 = self.lstm1(x_t, (h1, c1))
            h2, c2 = self.lstm2(h1, (h2, c2))
            outputs.append(self.linear(h2))
        for _ in range(future):
            h1, c1 = self.lstm1(outputs[-1], (h1, c1))
            h2, c2 = self.lstm2(h1, (h2, c2))
            outputs.append(self.linear(h2))
        return torch.cat(outputs, dim=1)


parser = argparse.ArgumentParser(description="sine waves predicted by an LSTM")
parser.add_argument("--steps", type=int, default=8, help="LBFGS steps to run")
opt = parser.parse_args()
torch.manual_seed(0)
waves = torch.sin(
    (torch.arange(60).double() + torch.randint(-20, 20, (20, 1)).double()) / 4.0
)  # 20 waves of 60 points, each shifted
train_x, train_y = waves[3:, :-1], waves[3:, 1:]
test_x, test_y = waves[:3, :-1], waves[:3, 1:]
seq = Sequence().double()
criterion = nn.MSELoss()
optimizer = torch.optim.LBFGS(seq.parameters(), lr=0.8)
for i in range(opt.steps):

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss: torch.Tensor = criterion(seq(train_x), train_y)
        loss.backward()  # type: ignore[no-untyped-call]
        return loss

    loss = optimizer.step(closure)  # type: ignore[no-untyped-call]
    with torch.no_grad():
        future = 20
        prediction = seq(test_x, future=future)
        test_loss = criterion(prediction[:, :-future], test_y).item()
    print(f"step {i}: loss {float(loss):.5f}, test loss {test_loss:.5f}")
