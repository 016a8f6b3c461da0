"""The SDK's data loader: any map-style dataset, a DataLoader underneath, and a position
that belongs to the job, not to the DataLoader.

The position is (epoch, samples of the epoch consumed by all ranks, seed); the epoch's order
is a permutation drawn from (seed, epoch) (`agents.data.EpochOrder`). The DataLoader is
built from the position on, with whatever worker count the job has now, so the worker count
can change at any batch boundary: the next DataLoader starts where the last one stopped,
and every sample of an epoch is consumed exactly once across any number of resizes, ranks
included (each global batch is split among the ranks). torchdata's StatefulDataLoader
cannot do this: it refuses to resume with a different `num_workers`.

An iterable-style dataset has no order to own: it runs on a plain DataLoader with the
worker count it started with, and the scheduler is told it cannot be resized.

Each worker times its batches (agents/loaderclock.py).
"""

import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from torch.utils.data import DataLoader, Dataset, IterableDataset, default_collate

from agents.audit import Audit
from agents.data import EpochOrder
from agents.loaderclock import Indices, LoaderClock, TimedCollate

# The longest `close` waits for a replaced DataLoader's workers: PyTorch's own shutdown
# gives each MP_STATUS_CHECK_INTERVAL (5 s) before it kills it.
RETIRE_WAIT_S = 30.0


class Boundary(Protocol):
    """What the loader tells its job: a batch goes to the script (it counts as consumed from
    then on, so a checkpoint the script writes after its step does not repeat it), and the
    script is back for the next one (the boundary where the job may stop or checkpoint).
    After an epoch's last batch the script's return only ends its step: the script's own
    end of the epoch comes first, then the job's boundary (`Job.epochs`). `refill`: the
    batch is the first of a pass, whose wait was the workers starting and the pipeline
    filling."""

    def on_batch(self, samples: int, refill: bool = False, evaluation: bool = False) -> None: ...

    def at_boundary(self) -> None: ...

    def step_ended(self) -> None: ...


@dataclass
class Position:
    """Where a loader is in its data; what a checkpoint keeps of it."""

    epoch: int = 0
    consumed: int = 0  # samples of this epoch consumed by all ranks together
    seed: int = 0
    samples: int = 0  # the dataset's length when saved: its order's; 0: not known

    def to_state(self) -> dict[str, int]:
        return {
            "epoch": self.epoch,
            "consumed": self.consumed,
            "seed": self.seed,
            "samples": self.samples,
        }

    @classmethod
    def from_state(cls, state: dict[str, int]) -> "Position":
        """From a checkpoint's (one of an older SDK has no `samples`)."""
        samples = int(state.get("samples", 0))
        return cls(int(state["epoch"]), int(state["consumed"]), int(state["seed"]), samples)


class ResizableLoader:
    """Iterate it as a DataLoader: each pass runs the current epoch from its position to its
    end. `workers` may change between batches; it takes effect at the next one."""

    def __init__(
        self,
        dataset: Dataset[Any],
        *,
        batch_size: int,
        shuffle: bool,
        drop_last: bool,
        rank: int,
        world_size: int,
        workers: int,
        position: Position,
        job: Boundary,
        dataloader_kwargs: dict[str, Any],
        audit: Audit | None = None,
        evaluation: bool = False,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size: must be at least 1, got {batch_size}")
        self.dataset = dataset
        self.resizable = not isinstance(dataset, IterableDataset)
        if self.resizable and not hasattr(dataset, "__len__"):
            raise TypeError(
                "dataset: a map-style dataset needs __len__ and __getitem__; an iterable one "
                "subclasses torch.utils.data.IterableDataset"
            )
        self.batch_size = batch_size  # per rank, as DataLoader's
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.rank, self.world_size = rank, world_size
        self.workers = workers
        self.position = position
        self._job = job
        self._kwargs = dataloader_kwargs
        self._audit = audit
        # False: a pass the script leaves early (a `break`) goes on where it stopped at the
        # next (the training data: each sample of an epoch once). True: the next pass is the
        # next epoch's, from its start, and its batches are no training steps (the job's
        # `evaluation` phase).
        self.evaluation = evaluation
        self.clock = LoaderClock()
        self._built_with: int | None = None  # the worker count of the live DataLoader
        self._renew = False  # start a new DataLoader at the next batch, whatever the count
        # With `persistent_workers`, the DataLoader whose workers live on from epoch to
        # epoch, and the batches it is to make next.
        self._kept: DataLoader[Any] | None = None
        self._batches = _Shares([])
        self._retiring: list[threading.Thread] = []  # replaced DataLoaders' workers stopping

    def rebuild(self) -> None:
        """Start a new DataLoader from the next batch on (its workers see the dataset as it
        is then), even with the same worker count."""
        self._renew = True

    def close(self) -> None:
        """Stop the workers of a DataLoader kept between passes (`persistent_workers`), and
        wait for those of replaced ones (`_retire`); the next pass, if any, starts new ones."""
        kept, self._kept = self._kept, None
        # PyTorch has no public way to stop a persistent DataLoader's workers; its iterator
        # does it when it is collected, which a suspended loop over it would delay.
        stop = getattr(getattr(kept, "_iterator", None), "_shutdown_workers", None)
        if stop is not None:
            stop()
        retiring, self._retiring = self._retiring, []
        for thread in retiring:
            thread.join(timeout=RETIRE_WAIT_S)

    def _retire(self, batches: Iterator[Any]) -> None:
        """Stop a replaced DataLoader's workers beside the next one's start rather than
        before it. A worker stops only after the batch it is making, which the resize throws
        away: most of a second for a batch of large JPEGs, and a batch's reads end to end when
        they wait on a remote store. Waiting for that added it to every resize's gap. `close`
        waits for them, so that none is left to the interpreter's exit."""
        stop = getattr(batches, "_shutdown_workers", None)  # PyTorch's own, idempotent
        if stop is None:
            return  # no workers
        self._retiring = [thread for thread in self._retiring if thread.is_alive()]
        thread = threading.Thread(target=stop, name="stoker-retire-workers", daemon=True)
        thread.start()
        self._retiring.append(thread)

    def __len__(self) -> int:
        """Batches left in the current epoch for this rank."""
        if not self.resizable:
            return len(self._plain())
        return len(self._global_batches())

    def _timed(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """`kwargs` with the collate function timing each worker's batches."""
        if self.workers > 0:
            collate = kwargs.get("collate_fn") or default_collate
            kwargs["collate_fn"] = TimedCollate(collate, self.clock.fresh(self.workers))
        return kwargs

    def __iter__(self) -> Iterator[Any]:
        if not self.resizable:
            yield from self._plain()
            return
        done = False
        try:
            yield from self._pass()
            done = True
        finally:
            if not done and self.evaluation:  # left early: this pass is over
                self.position.epoch += 1
                self.position.consumed = 0

    def _pass(self) -> Iterator[Any]:
        """The current epoch, from the loader's position to its end."""
        while True:
            batches = self._global_batches()
            if not batches:
                break
            stopped_for_resize = False
            loader = self._dataloader([self._share(batch) for batch in batches])
            made = iter(loader)
            for number, (batch, data) in enumerate(zip(batches, made, strict=True)):
                if self._audit is not None:
                    self._audit.record(
                        self.position.epoch, self.position.consumed, self._share(batch)
                    )
                self.position.consumed += len(batch)
                self._job.on_batch(len(batch), refill=number == 0, evaluation=self.evaluation)
                yield data
                if number == len(batches) - 1:
                    self._job.step_ended()  # a failure in the script's end of epoch is after it
                    break  # the epoch's end: Job.epochs has that boundary, after the script's
                self._job.at_boundary()
                if self.workers != self._built_with or self._renew:
                    stopped_for_resize = True  # the rest of the epoch with the new count
                    self._retire(made)
                    break
            if not stopped_for_resize:
                break
        # The epoch is done: the next pass is the next epoch.
        self.position.epoch += 1
        self.position.consumed = 0

    def batches_until(self, epochs: int) -> int | None:
        """The batches each rank takes from the loader's position to the end of epoch
        `epochs - 1` (all of `job.epochs(epochs)`); None for an iterable dataset, whose
        length is not known."""
        if not self.resizable:
            return None
        position = self.position
        if position.epoch >= epochs:
            return 0
        order = EpochOrder(samples=len(self.dataset), cursor=position.consumed)  # type: ignore[arg-type]
        size, world = self.batch_size * self.world_size, self.world_size
        now = order.batch_count(size, world, self.drop_last)
        order.cursor = 0
        return now + (epochs - position.epoch - 1) * order.batch_count(size, world, self.drop_last)

    def saved_position(self, *, advance: bool) -> Position:
        """Its position as a checkpoint keeps it. With `advance` (`job.epochs` counts the
        epochs), an epoch whose every batch has gone to the script is kept as the next one's
        start: the pass ends with the script's next request for a batch, which a checkpoint
        taken meanwhile has not seen. A script counting its own epochs meets that request
        as an empty pass, and then the next epoch, as its own count expects."""
        position = self.position
        samples = len(self.dataset) if self.resizable else 0  # type: ignore[arg-type]
        if advance and self.batches_until(position.epoch + 1) == 0:
            return Position(position.epoch + 1, 0, position.seed, samples)
        return Position(position.epoch, position.consumed, position.seed, samples)

    def _global_batches(self) -> list[list[int]]:
        order = EpochOrder(
            samples=len(self.dataset),  # type: ignore[arg-type]
            seed=self.position.seed,
            epoch=self.position.epoch,
            cursor=self.position.consumed,
            shuffle=self.shuffle,
        )
        batches = order.global_batches(self.batch_size * self.world_size, self.world_size)
        if self.drop_last and batches and len(batches[-1]) < self.batch_size * self.world_size:
            batches.pop()
        return batches

    def _share(self, batch: list[int]) -> list[int]:
        """This rank's part of a global batch (sizes differ by one at most)."""
        count = len(batch)
        return batch[
            self.rank * count // self.world_size : (self.rank + 1) * count // self.world_size
        ]

    def _dataloader(self, shares: list[list[int]]) -> DataLoader[Any]:
        """A DataLoader making these batches: with `persistent_workers`, the one whose workers
        made the last ones while their count holds and no `rebuild` was asked; else a new
        one (PyTorch's own rule: without the flag, workers start afresh each epoch)."""
        keep = bool(self._kwargs.get("persistent_workers")) and self.workers > 0
        if keep and self._kept is not None and self._built_with == self.workers and not self._renew:
            self._batches.shares = shares  # its next pass draws these (DataLoader resets it)
            self.clock.new_pass()
            return self._kept
        self._kept = None  # its workers stop as it goes
        self._built_with = self.workers
        self._renew = False
        kwargs = dict(self._kwargs)
        if self.workers > 0:
            kwargs["worker_init_fn"] = _quiet_workers(kwargs.get("worker_init_fn"))
        else:
            kwargs.pop("persistent_workers", None)
            kwargs.pop("prefetch_factor", None)
        self._batches = _Shares(shares)
        loader = DataLoader(
            self.dataset,
            batch_sampler=self._batches,
            num_workers=self.workers,
            **self._timed(kwargs),
        )
        if keep:
            self._kept = loader
        return loader

    def _plain(self) -> DataLoader[Any]:
        """The iterable dataset's one DataLoader: its workers never change, and with
        `persistent_workers` they live on from pass to pass."""
        if self._kept is not None:
            return self._kept
        self._built_with = self.workers
        kwargs = dict(self._kwargs)
        if self.workers > 0:
            kwargs["worker_init_fn"] = _quiet_workers(kwargs.get("worker_init_fn"))
        self._kept = DataLoader(
            self.dataset,
            batch_size=self.batch_size,
            drop_last=self.drop_last,
            num_workers=self.workers,
            **kwargs,  # not timed: its batches' indices are made in the workers
        )
        return self._kept


def _quiet_workers(user_init: Callable[[int], None] | None) -> Callable[[int], None]:
    """Workers leave Ctrl-C and SIGTERM to the main process, which checkpoints at the next
    batch boundary; then the user's own worker_init_fn."""
    return _WorkerInit(user_init)


@dataclass(frozen=True)
class _WorkerInit:
    """A picklable worker_init_fn (spawned workers get it by pickle)."""

    user_init: Callable[[int], None] | None

    def __call__(self, worker_id: int) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if self.user_init is not None:
            self.user_init(worker_id)


class _Shares:
    """A DataLoader's batch sampler: the batches (lists of indices) of its next pass, which
    the loader replaces before each pass of a DataLoader whose workers it keeps."""

    def __init__(self, shares: list[list[int]]) -> None:
        self.shares = shares

    def __len__(self) -> int:
        return len(self.shares)

    def __iter__(self) -> Iterator["Indices"]:
        return iter([Indices(share) for share in self.shares])
