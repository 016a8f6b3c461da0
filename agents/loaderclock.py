"""How long a loader's workers take over their batches, timed in the workers themselves.

Each worker times its batches (`LoaderClock`): wall seconds from taking up a batch's indices
(the moment its process unpickles them from its queue, so a worker idle for lack of work is
not counted) to handing over the collated batch. The daemon reads a worker's cost per
sample from it (scheduler/curves.py); without it a job's loaders could only be inferred from
its samples/s, which its GPU's rate and the knee's bend blur. It also reads, over the same
span, the CPU seconds it spent and the seconds it waited in the kernel's run queue for a
core (Linux's /proc/thread-self/schedstat): their ratio is the share of a core it got, which time
it spent waiting on a file or a socket does not lower.

The loader (agents/loader.py) puts `TimedCollate` around the job's collate function and
sends each batch's indices as `Indices`, which stamp the moment a worker takes them up;
`LoaderClock` sums what every DataLoader's workers wrote into memory they share with the
main process, and the link's heartbeat reads it (agents/heartbeat.py).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch.utils.data import get_worker_info


class LoaderClock:
    """What the workers of a loader's DataLoaders spent: wall seconds making batches, the
    samples in them, and the CPU seconds and run-queue seconds in them, summed over every
    DataLoader it built; and how many passes began (a new DataLoader, or a kept one's next
    epoch: either waits for its pipeline to fill, a cost per pass, not per sample)."""

    def __init__(self) -> None:
        self._retired = Clocked()
        self._live: torch.Tensor | None = None

    def fresh(self, workers: int) -> torch.Tensor:
        """A row per worker of a new DataLoader, in memory its workers share."""
        so_far = self.totals()
        self._retired = replace(so_far, starts=so_far.starts + 1)
        live = torch.zeros((workers, 4), dtype=torch.float64)
        self._live = live.share_memory_()  # type: ignore[no-untyped-call]
        return self._live

    def new_pass(self) -> None:
        """A kept DataLoader's workers begin another pass."""
        self._retired = replace(self._retired, starts=self._retired.starts + 1)

    def totals(self) -> "Clocked":
        retired = self._retired
        if self._live is None:
            return retired
        seconds, samples, cpu_seconds, wait_seconds = self._live.sum(dim=0).tolist()
        return Clocked(
            retired.seconds + seconds,
            retired.samples + samples,
            retired.starts,
            retired.cpu_seconds + cpu_seconds,
            retired.wait_seconds + wait_seconds,
        )


@dataclass(frozen=True)
class Clocked:
    """A `LoaderClock`'s totals: wall seconds and samples its workers made, passes begun,
    and in those wall seconds the CPU seconds they spent and the seconds they waited for a
    core (0 where the kernel does not say)."""

    seconds: float = 0.0
    samples: float = 0.0
    starts: int = 0
    cpu_seconds: float = 0.0
    wait_seconds: float = 0.0


@dataclass
class _Batch:
    """In a worker: when it took up the batch it is making (wall, CPU and run-queue clocks),
    and its samples (`Indices`)."""

    taken_up: tuple[float, float, float, int] | None = None


_MAKING = _Batch()
_SCHEDSTAT = "/proc/thread-self/schedstat"  # ns on a CPU, ns waiting in a run queue, slices


def thread_clocks() -> tuple[float, float]:
    """Seconds the calling thread has run on a core, and waited in a run queue for one,
    since it started; (0, 0) where the kernel does not say (not Linux, or no scheduler
    statistics). A loader worker makes its batches on its process's only thread."""
    try:
        with open(_SCHEDSTAT, "rb") as stats:
            ran, waited = stats.read().split()[:2]
            return int(ran) / 1e9, int(waited) / 1e9
    except (OSError, ValueError):
        return 0.0, 0.0


def _take_up(indices: list[int]) -> list[int]:
    _MAKING.taken_up = (time.monotonic(), time.process_time(), thread_clocks()[1], len(indices))
    return indices


class Indices(list[int]):
    """A batch's indices, stamped in the worker that unpickles them: the worker takes up a
    batch when it reads its indices from its queue, not when the main process sent them."""

    def __reduce__(self) -> tuple[Callable[[list[int]], list[int]], tuple[list[int]]]:
        return _take_up, (list(self),)


@dataclass(frozen=True)
class TimedCollate:
    """The job's collate function, then the batch's time into its worker's row."""

    collate: Callable[[Any], Any]
    clock: torch.Tensor

    def __call__(self, samples: Any) -> Any:
        batch = self.collate(samples)
        worker, taken, _MAKING.taken_up = get_worker_info(), _MAKING.taken_up, None
        if worker is not None and taken is not None:
            started, cpu_started, waited, count = taken
            wall, cpu = time.monotonic() - started, time.process_time() - cpu_started
            wait = max(0.0, thread_clocks()[1] - waited)
            spent = torch.tensor((wall, count, cpu, wait), dtype=torch.float64)
            self.clock[worker.id] += spent  # one write: a heartbeat reads all or none
        return batch
