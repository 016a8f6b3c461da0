"""What the zoo trainer before the SDK (`agents.master`, up to commit 9f261b5) left in a
job's directory at a pause, written again here in its format: the tests of agents/legacy.py
take it over as today's trainer would."""

import random
from pathlib import Path

import numpy as np
import torch

from agents.data import EpochOrder
from agents.models import build


def write_master_checkpoint(
    job_dir: Path, *, model: str, classes: int, samples: int, batch_size: int, iteration: int
) -> None:
    """`job_dir/checkpoint.pt` as that trainer saved it after `iteration` steps of one rank
    (seed 0, global batch `batch_size`, a dataset of `samples`), and its audit in
    `job_dir/audit/rank0.txt`: `epoch index` for each sample trained, its length recorded."""
    order, lines = EpochOrder(samples, seed=0), []
    for _ in range(iteration):
        batch = order.global_batches(batch_size, 1)[0]
        lines += [f"{order.epoch} {index}\n" for index in batch]
        order.advance(len(batch))
    (job_dir / "audit").mkdir(parents=True, exist_ok=True)
    (job_dir / "audit" / "rank0.txt").write_text("".join(lines))
    network = build(model, classes=classes)
    optimiser = torch.optim.SGD(network.parameters(), lr=0.05, momentum=0.9)
    state = {
        "job": job_dir.name,
        "model": network.state_dict(),
        "optimiser": optimiser.state_dict(),
        "epoch": order.epoch,
        "cursor": order.cursor,
        "iteration": iteration,
        "rng": {
            "torch": torch.get_rng_state(),
            "numpy": np.random.get_state(),
            "python": random.getstate(),
        },
        "audit_offsets": [len("".join(lines).encode())],
    }
    torch.save(state, job_dir / "checkpoint.pt")
