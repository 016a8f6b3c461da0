"""Data-parallel training on the stoker SDK: a small MLP in DistributedDataParallel, one
process per rank, on a classification set the example makes itself (points around a few
centres). Each global batch is split among the ranks; DDP averages their gradients.

    python examples/ddp.py --epochs 3                          # one rank, alone
    torchrun --nproc-per-node 2 examples/ddp.py --epochs 3     # two ranks (gloo on CPU)
    stoker submit examples/ddp.toml                            # two ranks under the daemon

Stop it with Ctrl-C and run it again: every rank goes on from the same checkpoint.
"""

import argparse

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset

import stoker


class Blobs(Dataset[tuple[torch.Tensor, int]]):
    """`count` points in `dims` dimensions around `classes` centres; the same for the same
    seed, so every rank makes the same set."""

    def __init__(self, count: int, dims: int = 8, classes: int = 4, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        centres = 2.0 * torch.randn(classes, dims, generator=generator)
        self.labels = torch.randint(classes, (count,), generator=generator)
        self.points = centres[self.labels] + torch.randn(count, dims, generator=generator)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.points[index], int(self.labels[index])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=64, help="global, over all ranks")
    args = parser.parse_args()

    job = stoker.init()  # with WORLD_SIZE > 1 it joins the process group (gloo, or NCCL)
    net = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 4)).to(job.device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    per_rank = args.batch_size // job.world_size  # each rank trains its share of a batch
    loader = job.loader(Blobs(args.samples), batch_size=per_rank, shuffle=True, num_workers=1)
    job.track(model=net, optimizer=optimizer)  # the bare module: any world size can resume it
    model = DistributedDataParallel(net) if job.world_size > 1 else net
    for epoch in job.epochs(args.epochs):
        for points, labels in loader:
            loss = nn.functional.cross_entropy(model(points.to(job.device)), labels.to(job.device))
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]  # DDP averages the gradients
            optimizer.step()
            job.report(loss=loss)  # rank 0's is kept
        print(f"rank {job.rank} epoch {epoch}: loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
