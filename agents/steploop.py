"""`job.steps(n)`: the SDK for a training loop without a DataLoader (pytorch/examples'
word_language_model slices tensors already in memory; time_sequence_prediction takes
LBFGS steps over all its data; regression draws its own batches until its loss is small).

Each step is a batch boundary as a loader's batch is: the daemon's pauses and cancels, the
periodic checkpoint and the heartbeat come between two steps. The position is the job's
step count and, inside `job.epochs(...)`, the step its epoch's pass is at
(`Job.steps_cursor`, kept in every checkpoint), so a relaunch goes on at the step after
the last checkpoint. There are no loader workers to change: the job says so, and the
scheduler plans around it and never pauses it to resize.
"""

from collections.abc import Iterator
from itertools import count
from typing import Protocol

from agents.control import Control


class StepJob(Protocol):
    """What a step loop needs of its job (agents/sdk.py's `Job`)."""

    steps_cursor: int

    @property
    def step(self) -> int: ...

    @property
    def in_epochs(self) -> bool: ...

    @property
    def control(self) -> Control | None: ...

    def fix_workers(self) -> None: ...

    def on_batch(self, samples: int, refill: bool = False, evaluation: bool = False) -> None: ...

    def step_ended(self) -> None: ...

    def at_boundary(self) -> None: ...

    def finish(self) -> None: ...


def steps(job: StepJob, total: int | None, samples: int) -> Iterator[int]:
    """See `Job.steps`."""
    if total is not None and total < 0:
        raise ValueError(f"job.steps({total}): give the steps to take, 0 or more (or None)")
    if samples < 1:
        raise ValueError(f"job.steps(samples={samples}): the samples a step trains, at least 1")
    job.fix_workers()
    inside_epochs = job.in_epochs
    if not inside_epochs and job.control is not None and total is not None:
        job.control.planned_iterations = lambda: total
    # A resumed run goes on where its checkpoint left the pass; alone, the pass is the run.
    start = job.steps_cursor if inside_epochs else job.step
    numbers = count(start) if total is None else iter(range(start, total))
    for number in numbers:
        job.on_batch(samples)
        job.steps_cursor = number + 1
        yield number
        last = total is not None and number == total - 1
        if last and inside_epochs:
            job.step_ended()  # the epoch's end is the boundary, after the script's own
        else:
            job.at_boundary()
    job.steps_cursor = 0  # the pass is over: the next starts at its first step
    if not inside_epochs and total is not None:
        job.finish()
