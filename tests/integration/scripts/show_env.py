"""Writes the environment it was given to <output dir>/env.json, and one of its DataLoader
workers' to env_worker.json, then finishes as an SDK job."""

import json
import os
from pathlib import Path

import torch
from torch.utils.data import Dataset, get_worker_info

import stoker


class WorkerEnvironment(Dataset[torch.Tensor]):
    """Each item a zero; a loader worker (not the main process) writes its environment."""

    def __init__(self, output: Path) -> None:
        self.output = output

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> torch.Tensor:
        if get_worker_info() is not None:
            (self.output / "env_worker.json").write_text(json.dumps(dict(os.environ)))
        return torch.zeros(1)


job = stoker.init()
(job.output_dir / "env.json").write_text(json.dumps(dict(os.environ)))
loader = job.loader(WorkerEnvironment(job.output_dir), batch_size=2)
for _ in job.epochs(1):
    for _batch in loader:
        pass
