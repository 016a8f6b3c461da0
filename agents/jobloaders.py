"""A job's loaders (`job.loader(...)`), in the order its script made them: each made once
for its dataset and settings (a script that asks again inside its epoch loop, as one may
for a DataLoader, gets the same one back, its position going on), placed where the
job's checkpoint left it, audited when the daemon asks (the first loader), and the first
one's workers clocked for the heartbeat. The job stops their workers when it ends, and
rebuilds them when a resume changes its workers.
"""

from collections.abc import Mapping, Sized
from typing import Any

from torch.utils.data import Dataset, IterableDataset

from agents.audit import Audit
from agents.control import Allocation, Control
from agents.environment import JobEnvironment, Say
from agents.loader import Boundary, Position, ResizableLoader
from agents.resume import carried


class JobLoaders:
    """The loaders of one job; `restored`: the checkpoint it goes on from, if any."""

    def __init__(
        self, environment: JobEnvironment, restored: Mapping[str, Any] | None, say: Say
    ) -> None:
        self.environment = environment
        self.made: list[ResizableLoader] = []
        # Each loader by its dataset and what it was asked for: a script that makes it inside
        # the epoch loop, as one may a DataLoader, gets the same one back.
        self._asked: dict[tuple[int, tuple[Any, ...]], ResizableLoader] = {}
        self._saved = list(restored["loaders"]) if restored is not None else []
        self._said_late = False
        self._say = say

    @property
    def primary(self) -> ResizableLoader | None:
        """The first loader: its epochs are the job's, its workers the ones timed."""
        return self.made[0] if self.made else None

    def make(
        self,
        dataset: Dataset[Any],
        *,
        batch_size: int,
        shuffle: bool,
        seed: int,
        drop_last: bool,
        num_workers: int,
        evaluation: bool,
        dataloader_kwargs: dict[str, Any],
        boundary: Boundary,
        epoch: int,
        late: bool,
    ) -> tuple[ResizableLoader, bool]:
        """The loader for `dataset` and these settings, and whether it is new: the one made
        before for them, or a new one at the position the checkpoint kept for the loader of
        its rank in order. `late`: the job has finished an epoch already."""
        kwargs = tuple(sorted(dataloader_kwargs))
        asked = (batch_size, shuffle, seed, drop_last, num_workers, evaluation, kwargs)
        again = self._asked.get((id(dataset), asked))
        if again is not None and again.dataset is dataset:
            return again, False  # its position goes on: the next epoch, not the first again
        # Other settings over the same dataset (an evaluation loader, say) are another loader.
        if late and not self._said_late:
            self._said_late = True  # once: a loop that does it does it every epoch
            self._say(
                f"job.loader made a new loader in epoch {epoch}: a new"
                " dataset object gets a loader of its own, with its own position (its epoch"
                " 0's order again) and untimed; make the loader once, before"
                " `for epoch in job.epochs(n)`, or pass the same dataset object"
            )
        index = len(self.made)
        position = Position(seed=seed)
        if index < len(self._saved):
            position = carried(Position.from_state(self._saved[index]), dataset, self._say)
        environment = self.environment
        workers, audit_dir = environment.workers, environment.audit_dir
        audit = None
        if audit_dir is not None and index == 0:  # the job's first loader is audited
            audit = Audit.resume(audit_dir, environment.rank, position.epoch, position.consumed)
        made = ResizableLoader(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            drop_last=drop_last,
            rank=environment.rank,
            world_size=environment.world_size,
            workers=num_workers if workers is None else workers,
            position=position,
            job=boundary,
            dataloader_kwargs=dataloader_kwargs,
            audit=audit,
            evaluation=evaluation,
        )
        self.made.append(made)
        self._asked[(id(dataset), asked)] = made
        return made, True

    def clock(self, made: ResizableLoader, control: Control, step: int) -> None:
        """Tell the daemon's link about a new loader: the first one's workers' cost is the
        job's loading, and one that cannot change its workers fixes the job's."""
        if made is self.made[0]:
            control.loader_clock = made.clock.totals
            control.loader_workers = lambda: made.workers
            control.batch_samples = made.batch_size * made.world_size
        if not made.resizable:
            control.fix_workers(step)

    def resize(self, allocation: Allocation) -> None:
        """A new DataLoader for each loader that can change its workers, from the next batch
        on, with the workers of `allocation` (the loader's own count where it has none)."""
        for loader in self.made:
            if loader.resizable:
                loader.workers = allocation.workers_per_rank or loader.workers
                loader.rebuild()

    def close(self) -> None:
        """Stop the workers the loaders keep between epochs (`persistent_workers`) before
        the script ends: left to the interpreter's exit, they are killed, and PyTorch then
        reports a worker "killed by signal" on stderr."""
        for loader in self.made:
            loader.close()


def check_batch(dataset: Dataset[Any], batch_size: int, world_size: int) -> None:
    """A step must fit in the dataset: DataLoader would silently train on less (or, with
    drop_last, on nothing)."""
    if batch_size < 1:
        raise ValueError(f"batch_size: must be at least 1, got {batch_size}")
    if isinstance(dataset, IterableDataset) or not isinstance(dataset, Sized):
        return  # its length, if any, is not the scheduler's to check
    samples, step = len(dataset), batch_size * world_size
    if step > samples:
        ranks = f" x {world_size} ranks = {step} samples per step" if world_size > 1 else ""
        raise ValueError(
            f"batch_size: {batch_size}{ranks} is more than the dataset's {samples} samples; "
            f"use a batch_size of at most {max(1, samples // world_size)}, or more data"
        )
