"""The stoker SDK: a few lines in a training script (`import stoker`; docs/sdk.md).

    job = stoker.init()
    loader = job.loader(dataset, batch_size=64, shuffle=True)
    job.track(model=model, optimizer=optimizer)      # restored here from the newest checkpoint
    for epoch in job.epochs(10):                     # resumes mid-epoch after a restart
        for x, y in loader:                          # each batch boundary is a pause point
            ...
            job.report(loss=loss)

Without a daemon (no STOKER_JOB_ID in the environment) the script is plain PyTorch:
checkpoints go to `./stoker-out/checkpoints` (or `init(output_dir=...)`), one every
`checkpoint_every_s`, one when Ctrl-C or SIGTERM stops it (at the next batch boundary, then
it exits with 128 + the signal), and a final one; the newest two are kept. Run it again and
it goes on from the newest. Metrics go to `<output dir>/metrics.jsonl`.

The rank, world size and local rank come from torchrun's variables (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT); with more than one rank `init` sets up
torch.distributed (NCCL on GPUs, gloo on CPUs), and the ranks agree at each boundary on
whether to stop, so they stop together.
"""

import atexit
import datetime
import hashlib
import json
import math
import operator
import os
import random
import signal
import sys
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sized
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, SupportsIndex, cast

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import Dataset, IterableDataset

from agents import checkpoints
from agents.audit import Audit
from agents.control import EVALUATION, SAVING, SETUP, TRAINING, Allocation, Control, Decision
from agents.loader import Position, ResizableLoader
from agents.phases import PhaseScope
from agents.steploop import steps
from allocator.types import DecodeMode

FORMAT = "stoker-sdk-checkpoint"
DEFAULT_CHECKPOINT_EVERY_S = 600.0
_METRICS_FLUSH_S = 5.0
_PAUSE_ALLOWED = datetime.timedelta(hours=6)  # longest collective wait: a pause, at most


@dataclass(frozen=True)
class JobEnvironment:
    """What the launcher tells a job through its environment, or the standalone defaults."""

    job_id: str | None  # None: no daemon
    attempt: int
    rank: int
    world_size: int
    local_rank: int
    output_dir: Path
    checkpoint_dir: Path
    workers: int | None  # loader workers per rank the scheduler gave; None: the script's own
    checkpoint_every_s: float
    control: str | None = None  # the daemon's agent endpoint; None: standalone
    gen: int = 0  # the plan that launched the job
    heartbeat_s: float = 1.0
    job_dir: Path | None = None  # where the daemon looks for the finished marker
    audit_dir: Path | None = None  # where the sample audit goes (agents/audit.py); None: none
    decode_mode: DecodeMode = "cpu"  # where the plan has the job decode its images
    decoder_share: float = 0.0  # of the node's decoder device
    decoder_endpoint: str | None = None  # the node's decoder service; None: none
    cold_resize: bool = False  # leave after a pause's checkpoint; the daemon starts it again
    paused_at: float | None = None  # a cold resize's relaunch: when the pause came (epoch s)
    # The checkpoints of the ended job this one continues (`stoker resume`): its start,
    # until it has checkpoints of its own.
    continue_from: Path | None = None

    @classmethod
    def read(
        cls,
        environ: Mapping[str, str],
        output_dir: Path | None = None,
        checkpoint_every_s: float | None = None,
    ) -> "JobEnvironment":
        output = Path(environ.get("STOKER_OUTPUT_DIR") or output_dir or "stoker-out")
        every = environ.get("STOKER_CHECKPOINT_EVERY_S")
        return cls(
            job_id=environ.get("STOKER_JOB_ID") or None,
            attempt=_integer(environ, "STOKER_ATTEMPT", 0),
            rank=_integer(environ, "RANK", 0),
            world_size=_integer(environ, "WORLD_SIZE", 1),
            local_rank=_integer(environ, "LOCAL_RANK", 0),
            output_dir=output,
            checkpoint_dir=Path(environ.get("STOKER_CHECKPOINT_DIR") or output / "checkpoints"),
            workers=_integer(environ, "STOKER_WORKERS", -1)
            if "STOKER_WORKERS" in environ
            else None,
            checkpoint_every_s=(
                float(every)
                if every
                else checkpoint_every_s
                if checkpoint_every_s is not None
                else DEFAULT_CHECKPOINT_EVERY_S
            ),
            control=environ.get("STOKER_CONTROL") or None,
            gen=_integer(environ, "STOKER_GEN", 0),
            heartbeat_s=float(environ.get("STOKER_HEARTBEAT_S") or 1.0),
            job_dir=Path(environ["STOKER_JOB_DIR"]) if environ.get("STOKER_JOB_DIR") else None,
            audit_dir=(
                Path(environ["STOKER_AUDIT_DIR"]) if environ.get("STOKER_AUDIT_DIR") else None
            ),
            decode_mode=cast(DecodeMode, _choice(environ, "STOKER_DECODE_MODE", ("cpu", "device"))),
            decoder_share=_number(environ, "STOKER_DECODER_SHARE") or 0.0,
            decoder_endpoint=environ.get("STOKER_DECODER") or None,
            cold_resize=_choice(environ, "STOKER_RESIZE", ("hot", "cold")) == "cold",
            paused_at=_number(environ, "STOKER_PAUSED_AT"),
            continue_from=(
                Path(environ["STOKER_CONTINUE_FROM"])
                if environ.get("STOKER_CONTINUE_FROM")
                else None
            ),
        )

    @property
    def allocation(self) -> Allocation:
        """What the launch gave the job."""
        return Allocation(self.workers, self.decoder_share, self.decode_mode)


@dataclass
class _Metrics:
    """Reported values, kept as given (tensors stay on their device) until a flush, which
    appends them to `path` and, under a daemon, sends them over the link."""

    path: Path
    control: Control | None = None
    pending: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    flushed_at: float = field(default_factory=time.monotonic)

    def add(self, step: int, values: dict[str, Any]) -> None:
        self.pending.append((step, values))

    def flush(self) -> None:
        if not self.pending:
            return
        rows = [(step, _numbers(values)) for step, values in self.pending]
        lines = [json.dumps({"step": step, **_readable(values)}) for step, values in rows]
        with self.path.open("a") as handle:  # in the output folder `Job` made
            handle.write("\n".join(lines) + "\n")
        if self.control is not None:
            self.control.report(rows)
        self.pending.clear()
        self.flushed_at = time.monotonic()


class Job:
    """One training job as its script sees it. Make it with `stoker.init()`."""

    def __init__(self, environment: JobEnvironment) -> None:
        self.environment = environment
        self.rank = environment.rank
        self.world_size = environment.world_size
        self.attempt = environment.attempt
        self.output_dir = environment.output_dir
        self.output_dir.mkdir(parents=True, exist_ok=True)  # the script's own files go here too
        self.device = _device(environment.local_rank)
        self.step = 0  # batches this rank has trained, over every attempt
        self._in_step = False  # the script has its batch and has not come back for the next
        # What the script is doing (`phase`): training once its first training batch came;
        # an evaluation loader's batches are no training steps.
        self._phase = SETUP
        self._training = False
        self._tracked: dict[str, Any] = {}
        self._loaders: list[ResizableLoader] = []
        # Each loader by its dataset and what it was asked for: a script that makes it inside
        # the epoch loop, as one may a DataLoader, gets the same one back.
        self._asked: dict[tuple[int, tuple[Any, ...]], ResizableLoader] = {}
        self._epochs_run = 0  # epochs this run finished: a loader made after one is late
        self._epochs_asked = 0  # the `count` of the running `job.epochs(count)`; 0: none runs
        # Steps of the last whole epoch this run trained (every loader's batches, an
        # evaluation's too), and the step the current epoch began at: `planned_iterations`.
        self._epoch_steps: int | None = None
        self._epoch_began = 0
        self._said_late = False
        self._reports = 0  # the step of the last report, in a script with no job.loader
        self._not_series: set[str] = set()  # reported names that are not numbers, said once
        self._stop_signal: int | None = None
        self.steps_cursor = 0  # `job.steps` inside an epoch: the steps its pass has taken
        self._trained = False  # epochs() ended: no boundary will come to stop at
        self._final = False  # the next checkpoint is the one `epochs()` ends with
        self._last_checkpoint = time.monotonic()
        self._control: Control | None = None  # set below, once the start is known
        newest, self._restored = self._start_from(environment)
        self._epoch = 0
        self._samples = 0  # consumed by all ranks, this run
        self._restored_names: set[str] = set()  # tracked names restored from the checkpoint
        self._allocation = environment.allocation
        self._on_allocation: list[Callable[[Allocation], None]] = []
        if environment.job_id is not None and environment.control is not None:
            self._control = Control(
                job_id=environment.job_id,
                endpoint=environment.control,
                gen=environment.gen,
                heartbeat_s=environment.heartbeat_s,
                rank=self.rank,
                world_size=self.world_size,
                job_dir=environment.job_dir or self.output_dir,
                allocation=self._allocation,
                paused_at=environment.paused_at,
            )
        self._metrics = _Metrics(self.output_dir / "metrics.jsonl", self._control)
        if self._restored is not None:
            self._resume(self._restored, newest)
        elif self._control is not None and self.attempt > 0:
            # A relaunch after a failure that came before the first checkpoint (one every
            # checkpoint_every_s): it trains again from the top, which the log should say.
            every = environment.checkpoint_every_s
            self._say(
                f"restart {self.attempt}: no checkpoint was written before the failure (one"
                f" comes every {every:g} s, checkpoint_every_s), so training starts from the"
                " top",
                afresh=False,
            )
        if self._control is not None:
            self._control.hello(self.step)
        # A script that ends without finishing (an exception, a `return` out of its loop)
        # keeps what it reported, and the daemon learns the steps it completed; one that
        # reports after its last epoch keeps that too. Through a weak reference: the hook
        # must not keep a job (its model, its loaders) alive in a process that makes more.
        atexit.register(_at_exit, weakref.ref(self))

    def _resume(self, restored: Mapping[str, Any], newest: Path | None) -> None:
        """Take the position a checkpoint kept, and say where the run goes on from."""
        self.step = int(restored["step"])
        self._epoch = int(restored["epoch"])
        _set_rng(restored["rng"])
        self._reports = int(restored.get("reports", 0))  # a script with no loader
        self.steps_cursor = int(restored.get("steps_cursor", 0))
        args = restored.get("args")
        other = ", a run of this script with other arguments" if args and args != _args() else ""
        self._say(f"resuming from {newest} (epoch {self._epoch}, step {self.step}{other})")

    def _start_from(self, environment: JobEnvironment) -> tuple[Path | None, dict[str, Any] | None]:
        """The checkpoint this run goes on from, and what it holds: the newest of its own,
        unless, without a daemon, that is a finished run's (a new run in the folder starts
        afresh, as a plain PyTorch script would; the finished one is kept in `finished/`,
        which STOKER_CONTINUE_FROM trains on from); else, for a job that continues an ended
        one, that one's newest. A run without a daemon refuses another script's checkpoint
        rather than load that model into its own."""
        own = environment.checkpoint_dir
        newest = checkpoints.latest(own)
        state = _read(newest) if newest is not None else None
        alone = environment.job_id is None and environment.continue_from is None
        if newest is not None and state is not None and state.get("final") and alone:
            kept = _put_aside(newest, own / "finished")
            self._say(
                f"{newest} is the final checkpoint of a finished run: kept as {kept}, and this"
                f" run starts afresh (STOKER_CONTINUE_FROM={kept.parent} trains on from it)",
                afresh=False,
            )
            newest = state = None
        if newest is None and environment.continue_from is not None:
            # A job that goes on from an ended one's checkpoint, read as this job's user:
            # its own checkpoints, once it has any, come first (a relaunch goes on from them).
            newest = checkpoints.latest(environment.continue_from)
            if newest is None:
                raise FileNotFoundError(
                    f"STOKER_CONTINUE_FROM: no checkpoint in {environment.continue_from} to"
                    " go on from (removed since the submit?); submit the job afresh"
                )
            state = _read(newest)
        script = state.get("script") if state is not None else None
        if environment.job_id is None and script and script != _script():
            fix = (
                "point STOKER_CONTINUE_FROM at this script's checkpoints"
                if newest is not None and newest.parent != own
                else f"give this script a folder of its own (stoker.init(output_dir=...) or"
                f" STOKER_OUTPUT_DIR), or remove {own} to start it afresh"
            )
            raise RuntimeError(
                f"stoker: {newest} is a checkpoint of {script}, not of this script"
                f" ({_script()}): {fix}"
            )
        return newest, state

    def _at_exit(self) -> None:
        """At the interpreter's exit: write (and send) the metrics not flushed yet, and tell
        the daemon the steps the script completed (a step that raised is not one: a script
        that fails in its first step made no progress a relaunch could build on). After
        `epochs()` ends, the metrics still go to the daemon too, and nothing else does;
        after a pause or a signal left, the link is closed: they go to metrics.jsonl only."""
        # Exiting: a failure here is said, never raised over what ended the script, and a
        # signal now must not cut the flush short (the link's linger bounds it).
        self._trained = False
        try:
            self._metrics.flush()
        except Exception as error:
            print(f"stoker: at exit, the last metrics were not saved: {error!r}", file=sys.stderr)
        if self._control is not None:
            try:
                completed = self.step - 1 if self._in_step else self.step
                self._control.last_step(completed, self._samples, self._stop_signal)
            except Exception as error:
                print(f"stoker: at exit, the daemon was not told: {error!r}", file=sys.stderr)
        elif self._metrics.control is not None:  # finished: the link was open for these alone
            self._metrics.control.close()  # sends them (up to the link's linger)

    def _say(self, what: str, afresh: bool = True) -> None:
        """A line on stderr from rank 0; alone, with how to start afresh instead (a second
        run of a script in the same folder goes on from the first's checkpoints)."""
        if self.rank != 0:
            return
        if self._control is None and afresh:
            what += (
                f"; to start afresh, remove {self.environment.checkpoint_dir}"
                " or give stoker.init(output_dir=...) another folder"
            )
        print(f"stoker: {what}", file=sys.stderr, flush=True)

    @property
    def resumed(self) -> bool:
        """Whether this run goes on from a checkpoint."""
        return self._restored is not None

    @property
    def allocation(self) -> Allocation:
        """What the scheduler gives the job now (standalone: no decoder, the script's own
        worker counts)."""
        return self._allocation

    def on_allocation(self, callback: Callable[[Allocation], None]) -> None:
        """Call `callback(allocation)` on every rank when the scheduler changes the job's
        allocation: at the batch boundary where a pause's resume comes, before any loader
        starts its next DataLoader (so what the callback changes in a dataset, such as where
        it decodes, reaches the new workers), and at the boundary where a live change of
        the decoder share comes (no pause, no new DataLoader)."""
        self._on_allocation.append(callback)

    # ---- the script's side -------------------------------------------------------------

    def phase(self, name: str) -> PhaseScope:
        """Say what the script is doing outside its training batches (`tokenising`,
        `evaluation`, `saving`, ...): `stoker show` and the dashboard show it, and however
        long it takes the daemon never takes it for a hang. `with job.phase("..."):` gives
        the phase before back at the end; a plain call lasts until the next training batch.
        The SDK says `setup`, `training`, `evaluation` (an evaluation loader's pass) and
        `saving` (a checkpoint) itself."""
        return PhaseScope(name, lambda: self._phase, self._back_to)

    def _back_to(self, name: str) -> None:
        # A scope opened in the setup ends in training once training has begun.
        self._set_phase(TRAINING if name == SETUP and self.step else name)

    def _set_phase(self, name: str) -> None:
        self._phase = name
        self._training = name == TRAINING
        if self._control is not None:
            self._control.set_phase(name)

    def loader(
        self,
        dataset: Dataset[Any],
        batch_size: int,
        shuffle: bool = True,
        *,
        seed: int = 0,
        drop_last: bool = False,
        num_workers: int = 0,
        evaluation: bool = False,
        **dataloader_kwargs: Any,
    ) -> ResizableLoader:
        """A DataLoader over `dataset` whose workers the scheduler may change at any batch
        boundary, and whose position survives restarts. `num_workers` is the count when no
        scheduler says otherwise; `batch_size` is per rank, as DataLoader's. A pass the
        script leaves early (a `break`) goes on where it stopped at the next, so that each
        sample of an epoch is trained once; with `evaluation`, such a pass is over and the
        next starts at the beginning, as a DataLoader's does (a validation of a few
        batches)."""
        for owned in ("sampler", "batch_sampler"):
            if owned in dataloader_kwargs:
                raise TypeError(
                    f"{owned}: the job's loader owns the order of the data; leave it out:"
                    " job.loader shuffles (shuffle=, seed=) and splits each batch across the"
                    " ranks itself, as a DistributedSampler would"
                )
        _check_batch(dataset, batch_size, self.world_size)
        kwargs = tuple(sorted(dataloader_kwargs))
        asked = (batch_size, shuffle, seed, drop_last, num_workers, evaluation, kwargs)
        again = self._asked.get((id(dataset), asked))
        if again is not None and again.dataset is dataset:
            return again  # its position goes on: the next epoch, not the first again
        # Other settings over the same dataset (an evaluation loader, say) are another loader.
        if self._epochs_run and not self._said_late:
            self._said_late = True  # once: a loop that does it does it every epoch
            self._say(
                f"job.loader made a new loader in epoch {self._epoch}: a new"
                " dataset object gets a loader of its own, with its own position (its epoch"
                " 0's order again) and untimed; make the loader once, before"
                " `for epoch in job.epochs(n)`, or pass the same dataset object",
                afresh=False,
            )
        index = len(self._loaders)
        position = Position(seed=seed)
        if self._restored is not None and index < len(self._restored["loaders"]):
            position = self._carried(Position.from_state(self._restored["loaders"][index]), dataset)
        workers, audit_dir = self.environment.workers, self.environment.audit_dir
        audit = None
        if audit_dir is not None and index == 0:  # the job's first loader is audited
            audit = Audit.resume(audit_dir, self.rank, position.epoch, position.consumed)
        made = ResizableLoader(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            drop_last=drop_last,
            rank=self.rank,
            world_size=self.world_size,
            workers=num_workers if workers is None else workers,
            position=position,
            job=self,
            dataloader_kwargs=dataloader_kwargs,
            audit=audit,
            evaluation=evaluation,
        )
        self._loaders.append(made)
        self._asked[(id(dataset), asked)] = made
        if index == 0 and self._control is not None:  # its workers' cost: the job's loading
            self._control.loader_clock = made.clock.totals
            self._control.loader_workers = lambda: made.workers
            self._control.batch_samples = batch_size * self.world_size
        if not made.resizable and self._control is not None:
            self._control.fix_workers(self.step)
        return made

    def _carried(self, saved: Position, dataset: Dataset[Any]) -> Position:
        """A checkpoint's loader position over `dataset`: as saved, unless the dataset's
        length is not the one the saved epoch's order was drawn for (a job continued on
        other data): then that epoch starts again from its first sample, as said."""
        length = len(dataset) if isinstance(dataset, Sized) else None
        if not saved.samples or length is None or length == saved.samples or not saved.consumed:
            return saved
        self._say(
            f"the checkpoint's loader had {saved.samples:,} samples and this dataset has"
            f" {length:,}: its place in epoch {saved.epoch} ({saved.consumed:,} consumed) does"
            f" not carry over, so epoch {saved.epoch} starts again from its first sample",
            afresh=False,
        )
        return Position(saved.epoch, 0, saved.seed, length)

    def track(self, **objects: Any) -> None:
        """What a checkpoint keeps: objects with state_dict/load_state_dict (model,
        optimizer, LR scheduler, scaler) or plain values (numbers, strings, lists, dicts,
        tensors), read back with `job.state[name]`. Restored from a checkpoint at the first
        `track` of each name; tracking a name again (a plain value's new value) replaces
        what the next checkpoint keeps, and restores nothing."""
        for name, value in objects.items():
            self._tracked[name] = value
            if self._restored is None or name not in self._restored["tracked"]:
                continue
            if name in self._restored_names:
                continue  # restored once: this is the script's newer value
            self._restored_names.add(name)
            saved = self._restored["tracked"][name]
            if hasattr(value, "load_state_dict"):
                value.load_state_dict(saved)
            else:
                self._tracked[name] = saved

    @property
    def state(self) -> Mapping[str, Any]:
        """The tracked objects by name, plain values as restored."""
        return self._tracked

    def epochs(self, count: int) -> Iterator[int]:
        """Epochs from where the job is to `count`; the last checkpoint when they are done.
        Between two epochs, after the script's own end of an epoch, is a batch boundary (the
        loaders leave their last one to it), so a stop there goes on with the next epoch."""
        self._trained = False  # a second training phase stops at its boundaries again
        self._final = False
        self._epochs_asked = count
        if self._control is not None:
            self._control.planned_iterations = self.planned_iterations
        if self._restored is not None and self._epoch >= count:
            self._say(f"epoch {self._epoch} of {count}: nothing left to train", afresh=False)
        whole = bool(self._loaders) and self._loaders[0].position.consumed == 0
        while self._epoch < count:
            epoch = self._epoch
            self._epoch_began = self.step
            yield epoch
            if whole:  # it began at its start (a resumed one did not): count its steps
                self._epoch_steps = self.step - self._epoch_began
            whole = True
            self._epochs_run += 1
            primary = self._loaders[0] if self._loaders else None
            if primary is not None and primary.position.epoch > epoch:
                self._epoch = primary.position.epoch
            else:  # a custom loop, or one that left its loader early: the epoch ends here
                self._epoch = epoch + 1
                if primary is not None:
                    primary.position.epoch, primary.position.consumed = self._epoch, 0
            self._epoch_began = self.step  # the next one's: a heartbeat at this boundary
            if self._epoch < count:
                self.at_boundary()
        self.finish()

    @property
    def in_epochs(self) -> bool:
        """Whether `job.epochs(n)` is running: its passes are epochs'."""
        return bool(self._epochs_asked) and not self._trained

    @property
    def control(self) -> Control | None:
        """The link to the daemon on this rank (None standalone, or once finished)."""
        return self._control

    def fix_workers(self) -> None:
        """Tell the daemon the job has no loader workers it can change (`job.steps`): none
        at all, unless a `job.loader` of its own has some."""
        if self._control is not None:
            self._control.fix_workers(self.step, loaderless=not self._loaders)

    def finish(self) -> None:
        """Training is done: the final checkpoint, and `finished` to the daemon."""
        self._final = True  # the checkpoint that ends it: a new run does not resume it
        self.checkpoint()
        self._metrics.flush()
        self._stop_workers()
        if self._control is not None:
            self._control.finished(self.step)
            # The job is done with the scheduler: no more boundaries, heartbeats or last
            # word. The link stays open for the metrics alone: what the script reports
            # after training (an evaluation's accuracy) is sent as it is reported
            # (`report`), and the job's exit hook (`_at_exit`) closes the link.
            self._control = None
        self._trained = True  # after `finished`: a signal now ends a finished job
        if self._stop_signal is not None:  # one came during the final checkpoint
            raise SystemExit(128 + self._stop_signal)

    def steps(self, total: int | None = None, *, samples: int = 1) -> Iterator[int]:
        """A step loop for a script without a DataLoader (its data already in memory):
        `for i in job.steps(n): ...` yields 0 to n - 1, or from where a checkpoint left it,
        each step a pause and checkpoint point as a loader's batch is. Inside
        `job.epochs(...)`, a pass over one epoch (its position saved mid-epoch); alone, the
        whole run, whose last step writes the final checkpoint. `total` None: until the
        script breaks out (the daemon takes its exit 0 as its end; no final checkpoint).
        `samples`: what a step trains, all ranks, for the samples/s the daemon shows. The
        script's own state (a learning rate, the best loss so far, an RNN's hidden state)
        goes in `job.track(...)`."""
        return steps(self, total, samples)

    def planned_iterations(self) -> int:
        """The step this rank will have reached when the running `job.epochs(n)` ends (0
        when unknown: no `epochs()` runs, no loader yet, or an iterable dataset). Once an
        epoch has run whole, its steps times the epochs left, every loader's batches
        counted (an evaluation loader's too); before, the steps taken and the batches its
        first loader has left. A loop that leaves its loader early ends sooner."""
        count = self._epochs_asked
        if not count:
            return 0
        if self._epoch_steps is not None:
            planned = self._epoch_began + (count - self._epoch) * self._epoch_steps
            return max(planned, self.step)
        primary = self._loaders[0] if self._loaders else None
        left = primary.batches_until(count) if primary is not None else None
        return 0 if left is None else self.step + left

    def _stop_workers(self) -> None:
        """Stop the workers the loaders keep between epochs (`persistent_workers`) before
        the script ends: left to the interpreter's exit, they are killed, and PyTorch then
        reports a worker "killed by signal" on stderr."""
        for loader in self._loaders:
            loader.close()

    def report(self, *, step: SupportsIndex | None = None, **metrics: Any) -> None:
        """Record metrics for this step: numbers, one-element tensors or NumPy scalars (a
        string or another value JSON can write goes to metrics.jsonl but makes no series).
        Tensors are read (one device sync for all of them) only when the metrics are
        flushed, every few seconds and at each checkpoint; after `epochs()` (an
        evaluation's), at once. Rank 0's are kept (one series per job). A value that cannot
        be kept raises here, naming it, rather than at the flush, steps later.

        `step`: the step to record them at, for a script that counts its own; else the
        batches its `job.loader`s gave, or, in a script with none, the count of its
        `report` calls (each call a step)."""
        if self.rank != 0:
            return  # one series per job: rank 0's
        values = {name: self._reportable(name, value) for name, value in metrics.items()}
        self._metrics.add(self._report_step(step), values)
        if self._trained:  # no batch boundary comes after training to flush it: now
            self._metrics.flush()
        elif not self._loaders and time.monotonic() - self._metrics.flushed_at >= _METRICS_FLUSH_S:
            self._metrics.flush()  # no batch boundary of a loader flushes them either

    def _report_step(self, step: SupportsIndex | None) -> int:
        """The step a `report` records at: `step` when given, else the loaders' (or
        `job.steps`') count, else one more than the last report's."""
        if step is not None:
            try:  # an int, a NumPy integer or a 0-d integer tensor (a `global_step`)
                given = operator.index(step)
            except TypeError:
                given = -1
            if isinstance(step, bool) or given < 0:
                raise ValueError(f"job.report(step=...): a whole number >= 0, got {step!r}")
            self._reports = max(self._reports, given)
            return given
        if self._loaders or self.step:
            return self.step
        self._reports += 1
        if self._reports == 1:
            self._say(
                "job.report: no job.loader counts this script's steps, so each report() call"
                " counts as one (give job.report(step=N, ...) to say which)",
                afresh=False,
            )
        return self._reports

    def _reportable(self, name: str, value: Any) -> Any:
        """`value` as the metrics keep it, or a TypeError or ValueError naming it."""
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise ValueError(
                    f"job.report({name}=...): a tensor of {value.numel()} elements; report one"
                    f" number, {name}.mean() say"
                )
            return value.detach()
        if isinstance(value, np.generic):  # np.float32(...): not a float to JSON
            return self._reportable(name, value.item())
        if isinstance(value, int | float):
            return value
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise TypeError(
                f"job.report({name}=...): a {type(value).__name__} cannot be written to"
                " metrics.jsonl; report a number (or a string)"
            ) from None
        if name not in self._not_series:
            self._not_series.add(name)
            self._say(
                f"job.report({name}=...): a {type(value).__name__} goes to metrics.jsonl but"
                " makes no series (the daemon keeps numbers and one-element tensors)",
                afresh=False,
            )
        return value

    def should_stop(self) -> bool:
        """For loops that do not iterate `job.loader`: whether to checkpoint and leave now
        (a signal came, on any rank)."""
        return self._agree(self._stop_signal is not None)[0]

    def checkpoint(self) -> Path | None:
        """Write a checkpoint now (rank 0 writes; every rank calls); its path on rank 0."""
        self._last_checkpoint = time.monotonic()
        self._metrics.flush()  # the series up to the checkpoint survives a crash with it
        path = None
        if self.rank == 0:
            with self.phase(SAVING):
                path = checkpoints.write(self.environment.checkpoint_dir, self._checkpoint_state())
        if self.world_size > 1:
            dist.barrier()
        return path

    # ---- the loaders' side --------------------------------------------------------------

    def on_batch(self, samples: int, refill: bool = False, evaluation: bool = False) -> None:
        """A batch of `samples` (all ranks) went to the script: one more step, unless an
        `evaluation` loader's (the job is in its evaluation phase until its next training
        batch). `refill`: the first batch of a pass, whose wait was the pipeline filling."""
        if evaluation:
            if self._phase != EVALUATION:
                self._set_phase(EVALUATION)
            return
        if not self._training:
            self._set_phase(TRAINING)
        self.step += 1
        self._in_step = True
        self._samples += samples
        if self._control is not None:
            self._control.on_batch(samples, refill)

    def step_ended(self) -> None:
        """The script came back after an epoch's last batch: that step is done; the
        boundary comes after the script's own end of the epoch."""
        self._in_step = False

    def at_boundary(self) -> None:
        """Between two batches: flush metrics, stop when asked (after a checkpoint), and
        checkpoint when it is time. Its usual path, nothing to do, is kept short: it runs
        once a step, right after the step, when the caches are cold (docs/results.md)."""
        self._in_step = False
        now = time.monotonic()
        if now - self._metrics.flushed_at >= _METRICS_FLUSH_S:
            self._metrics.flush()
        control = self._control
        if control is not None:
            decision = control.at_boundary(self.step, self._samples)
            if control.allocation is not self._allocation:  # a live share change
                self._allocated(control.allocation, rebuild=False)
            if decision:  # a pause or a cancel (GO is 0: no enum looked up on the usual path)
                self._obey(control, decision)
        # Every rank must call checkpoint() at the same boundary (it ends in a barrier), so
        # the ranks agree on it as on a stop: one rank's clock says so for all.
        due = now - self._last_checkpoint >= self.environment.checkpoint_every_s
        stop = self._stop_signal is not None
        if self.world_size > 1:
            stop, due = self._agree(stop, due)
        if stop:
            self._leave()
        if due:
            self.checkpoint()

    def _obey(self, control: Control, decision: Decision) -> None:
        if decision is Decision.PAUSE:
            self._pause(control)
        elif decision is Decision.CANCEL:
            self._leave(cancelled=True)

    def on_signal(self, signum: int, _: FrameType | None) -> None:
        """SIGINT or SIGTERM: stop at the next batch boundary, after a checkpoint; after
        training (no boundary comes), exit now, as Python would: the exit hook keeps what
        the script reported."""
        if self._trained:
            raise SystemExit(128 + signum)
        self._stop_signal = signum

    def _pause(self, control: Control) -> None:
        """The daemon's pause: checkpoint, wait for the resume, and take its allocation
        from the next batch on (the loaders rebuild their DataLoaders). A job that resizes
        cold leaves after the checkpoint instead, with status 0."""
        path = self.checkpoint()
        self._metrics.flush()
        if self.environment.cold_resize:
            control.paused(self.step, path, wait=False)
            if self.rank == 0:
                print("stoker: cold resize: exiting after the checkpoint", file=sys.stderr)
            self._leave(cancelled=True, checkpointed=True)
            return
        allocation = control.paused(self.step, path)
        if allocation is None:
            self._leave(cancelled=True, checkpointed=True)
            return
        if allocation != self._allocation:
            self._allocated(allocation, rebuild=True)

    def _allocated(self, allocation: Allocation, *, rebuild: bool) -> None:
        """Take a new allocation: the loaders' worker counts (and with `rebuild`, a new
        DataLoader each from the next batch on), then the script's callbacks."""
        self._allocation = allocation
        for loader in self._loaders:
            if loader.resizable and rebuild:
                loader.workers = allocation.workers_per_rank or loader.workers
                loader.rebuild()
        for callback in self._on_allocation:
            callback(allocation)

    def _leave(self, *, cancelled: bool = False, checkpointed: bool = False) -> None:
        """Checkpoint and exit: 0 when the daemon cancelled the job, 128 + the signal for
        a signal."""
        path = None if checkpointed else self.checkpoint()
        self._metrics.flush()
        self._stop_workers()
        if self._control is not None:
            # Where it stopped, at a boundary: a cancelled job's end (`stoker resume` goes on
            # from there), or a signalled one's progress; the link is closed before the exit.
            self._control.last_step(self.step, self._samples, self._stop_signal)
            self._control.close()
        if cancelled:
            raise SystemExit(0)
        signum = self._stop_signal or signal.SIGTERM
        if path is not None:
            print(f"stoker: stopped by signal {signum}; checkpoint {path}", file=sys.stderr)
        raise SystemExit(128 + signum)

    def _agree(self, *mine: bool) -> list[bool]:
        """For each question, whether any rank says yes (one small all-reduce per call with
        several ranks)."""
        if self.world_size == 1:
            return list(mine)
        flags = torch.tensor([1.0 if yes else 0.0 for yes in mine], device=self.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        return [flag > 0 for flag in flags.tolist()]

    def _checkpoint_state(self) -> dict[str, Any]:
        # A checkpoint of the script's own between its first loader's last batch and the
        # next epoch (its end-of-epoch code), inside `job.epochs`: a resumed run starts the
        # next epoch, under its number, as one stopped at that boundary does.
        driving = bool(self._epochs_asked) and not self._trained
        positions = [loader.saved_position(advance=driving) for loader in self._loaders]
        epoch = max(self._epoch, positions[0].epoch) if positions and driving else self._epoch
        return {
            "format": FORMAT,
            "version": 1,
            "step": self.step,
            "epoch": epoch,
            "loaders": [position.to_state() for position in positions],
            "tracked": {
                name: value.state_dict() if hasattr(value, "state_dict") else value
                for name, value in self._tracked.items()
            },
            "rng": _rng_state(),
            "reports": self._reports,  # a script with no loader: its series goes on
            "steps_cursor": self.steps_cursor,  # `job.steps`: where its pass is
            # Which run wrote it (not its arguments, which may hold a secret): another
            # script's is not resumed, and a resume says when the arguments differ.
            "script": _script(),
            "args": _args(),
            "final": self._final,  # the end of `job.epochs`: a new run starts afresh
        }


def init(*, output_dir: str | Path | None = None, checkpoint_every_s: float | None = None) -> Job:
    """The job this process is: from the launcher's STOKER_* and torchrun variables, or
    standalone. Sets up torch.distributed for several ranks, and turns SIGINT and SIGTERM
    into a checkpoint at the next batch boundary."""
    environment = JobEnvironment.read(
        os.environ, Path(output_dir) if output_dir is not None else None, checkpoint_every_s
    )
    if environment.world_size > 1 and not dist.is_initialized():
        # NCCL for CUDA tensors; gloo as well on GPUs, for the control broadcast's CPU ones
        backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(
            backend,
            rank=environment.rank,
            world_size=environment.world_size,
            # The other ranks wait in a collective while rank 0 waits for its resume: a pause
            # may last longer than torch's default (30 min for gloo, 10 for NCCL).
            timeout=_PAUSE_ALLOWED,
        )
    job = Job(environment)
    if output_dir is not None and Path(output_dir) != environment.output_dir:
        # The daemon gives each job its own folder (`stoker show` names it): a script run
        # twice at once must not write over itself, and its files are found by its id.
        job._say(
            f"under the daemon, job.output_dir is {environment.output_dir}, not"
            f" {output_dir} (stoker.init(output_dir=...) is for runs without it)",
            afresh=False,
        )
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, job.on_signal)
    return job


# ---- helpers ------------------------------------------------------------------------------


def _check_batch(dataset: Dataset[Any], batch_size: int, world_size: int) -> None:
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


def _integer(environ: Mapping[str, str], name: str, default: int) -> int:
    text = environ.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}: a whole number, got {text!r}") from None


def _number(environ: Mapping[str, str], name: str) -> float | None:
    text = environ.get(name)
    if text is None or text == "":
        return None
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{name}: a number, got {text!r}") from None


def _choice(environ: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """The variable's value, one of `choices`; the first when unset."""
    value = environ.get(name) or choices[0]
    if value not in choices:
        raise ValueError(f"{name}: one of {', '.join(choices)}, got {value!r}")
    return value


def _device(local_rank: int) -> torch.device:
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _at_exit(job: "weakref.ref[Job]") -> None:
    """The interpreter's exit: the job's `_at_exit`, if the job is still there."""
    alive = job()
    if alive is not None:
        alive._at_exit()


def _numbers(values: Mapping[str, Any]) -> dict[str, Any]:
    """Tensors read as Python numbers (one device sync for all tensors of a step); other
    values as given."""
    tensors = [name for name, value in values.items() if isinstance(value, torch.Tensor)]
    result = {name: value for name, value in values.items() if name not in tensors}
    if tensors:
        read = torch.stack([values[name].float().reshape(()) for name in tensors]).tolist()
        result.update(zip(tensors, read, strict=True))
    return result


def _readable(values: Mapping[str, Any]) -> dict[str, Any]:
    """Values strict JSON can carry: a NaN or infinite loss as the string "nan" or "inf"."""
    return {
        name: (value if not isinstance(value, float) or math.isfinite(value) else str(value))
        for name, value in values.items()
    }


def _rng_state() -> dict[str, Any]:
    numpy_state = np.random.get_state()
    assert isinstance(numpy_state, tuple)  # the legacy form: (name, keys, pos, gauss, cached)
    name, keys, position, has_gauss, cached = numpy_state
    return {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [name, keys.tolist(), position, has_gauss, cached],
    }


def _set_rng(state: Mapping[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    name, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), position, has_gauss, cached))


def _script() -> str:
    """The script this process runs, by its full path ("" when none: `python -c`)."""
    return os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""


def _args() -> str:
    """A digest of this run's arguments: told apart, never kept."""
    return hashlib.sha256(json.dumps(sys.argv[1:]).encode()).hexdigest()[:16]


def _read(path: Path) -> dict[str, Any]:
    """A checkpoint of the SDK's, or ValueError naming the file."""
    state = checkpoints.read(path)
    _check_format(state, path)
    return state


def _put_aside(path: Path, folder: Path) -> Path:
    """Move a finished run's final checkpoint into `folder`, in place of the one there,
    out of the way of the next run's (only the newest two are kept); its earlier ones,
    beside it, go: a later run must not go on from one of them."""
    folder.mkdir(mode=0o700, exist_ok=True)
    for older in folder.glob("checkpoint-*.pt"):
        older.unlink()
    kept = folder / path.name
    path.replace(kept)
    for earlier in checkpoints.checkpoint_files(path.parent):
        earlier.unlink()
    return kept


def _check_format(state: Mapping[str, Any], path: Path | None) -> None:
    if state.get("format") != FORMAT:
        raise ValueError(f"{path}: not a stoker SDK checkpoint (format {state.get('format')!r})")
