"""What the SDK's unit tests build on: a dataset whose samples say who they are, and a job
made from the environment a daemon would give it."""

from pathlib import Path

import torch
from torch.utils.data import Dataset

from agents.environment import JobEnvironment
from agents.sdk import Job


class Numbers(Dataset[tuple[torch.Tensor, int]]):
    """Sample i is (a tensor of i, i): a batch says which samples it holds."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.full((2,), float(index)), index


def job(tmp_path: Path, **environ: str) -> Job:
    return Job(JobEnvironment.read(environ, tmp_path / "out", checkpoint_every_s=3600.0))
