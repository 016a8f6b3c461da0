"""A non-image job on the stoker SDK: a small MLP on a tabular dataset the example makes
itself (houses: rooms, area, age -> price), with its own map-style Dataset.

    python examples/tabular.py --epochs 3            # alone: checkpoints in ./stoker-out
    stoker submit examples/tabular.toml              # under the daemon

Stop it with Ctrl-C and run it again: it goes on from its checkpoint.
"""

import argparse

import torch
from torch import nn
from torch.utils.data import Dataset

import stoker


class Houses(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """`count` rows drawn from a fixed rule with noise; the same rows for the same seed."""

    def __init__(self, count: int, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.features = torch.rand(count, 3, generator=generator)
        weights = torch.tensor([2.0, 3.0, -1.0])
        noise = 0.05 * torch.randn(count, generator=generator)
        self.prices = self.features @ weights + 0.5 + noise

    def __len__(self) -> int:
        return len(self.prices)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.features[index], self.prices[index : index + 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    job = stoker.init()
    model = nn.Sequential(nn.Linear(3, 32), nn.ReLU(), nn.Linear(32, 1)).to(job.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loader = job.loader(Houses(args.rows), batch_size=64, shuffle=True, num_workers=1)
    job.track(model=model, optimizer=optimizer)
    for epoch in job.epochs(args.epochs):
        for features, prices in loader:
            predicted = model(features.to(job.device))
            loss = nn.functional.mse_loss(predicted, prices.to(job.device))
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            job.report(loss=loss)
        print(f"epoch {epoch}: loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
