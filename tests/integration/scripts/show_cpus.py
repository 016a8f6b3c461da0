"""A user's script on the stoker SDK that prints the CPUs its loader worker ran on for each
batch and, at the end, the CPUs its rank may run on (`node.cpu_sets`).
Arguments: EPOCHS SLEEP_S_PER_STEP."""

import os
import sys
import time

import torch
from torch.utils.data import Dataset

import stoker


class Affinity(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor(sorted(os.sched_getaffinity(0)))


def main() -> None:
    epochs, pause_s = int(sys.argv[1]), float(sys.argv[2])
    job = stoker.init()
    loader = job.loader(Affinity(), batch_size=4, num_workers=1)
    for _ in job.epochs(epochs):
        for batch in loader:
            print("loader cpus", batch[0].tolist(), flush=True)
            time.sleep(pause_s)
            job.report(loss=0.0)
    print("rank cpus", sorted(os.sched_getaffinity(0)), flush=True)


if __name__ == "__main__":
    main()
