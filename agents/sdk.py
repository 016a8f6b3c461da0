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
import os
import signal
import weakref
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import FrameType
from typing import Any, SupportsIndex

import torch
import torch.distributed as dist
from torch.utils.data import Dataset

from agents.boundary import BatchBoundaries
from agents.checkpointformat import args_digest, sdk_state, set_rng
from agents.control import Allocation, Control
from agents.environment import JobEnvironment
from agents.epochs import Epochs
from agents.jobloaders import JobLoaders, check_batch
from agents.loader import ResizableLoader
from agents.phases import PhaseScope
from agents.reports import Metrics, Reports
from agents.resume import start_from
from agents.steploop import steps

_PAUSE_ALLOWED = datetime.timedelta(hours=6)  # longest collective wait: a pause, at most


class Job:
    """One training job as its script sees it. Make it with `stoker.init()`. Its batch
    boundaries (pauses, stops, checkpoints) are agents/boundary.py's, its loaders
    agents/jobloaders.py's, its reports agents/reports.py's."""

    def __init__(self, environment: JobEnvironment) -> None:
        self.environment = environment
        self.rank = environment.rank
        self.world_size = environment.world_size
        self.attempt = environment.attempt
        self.output_dir = environment.output_dir
        self.output_dir.mkdir(parents=True, exist_ok=True)  # the script's own files go here too
        self.device = _device(environment.local_rank)
        self._tracked: dict[str, Any] = {}
        self._restored_names: set[str] = set()  # tracked names restored from the checkpoint
        self.steps_cursor = 0  # `job.steps` inside an epoch: the steps its pass has taken
        newest, self._restored = start_from(environment, environment.say)
        control = _connect(environment)
        self._metrics = Metrics(self.output_dir / "metrics.jsonl", control)
        self._loaders = JobLoaders(environment, self._restored, environment.say)
        self._run = BatchBoundaries(
            environment,
            device=self.device,
            control=control,
            metrics=self._metrics,
            loaders=self._loaders,
            state=self._checkpoint_state,
        )
        self._reports = Reports(self._metrics, environment.say)
        self._epochs = Epochs(self._run, self._loaders)
        if self._restored is not None:
            self._resume(self._restored, newest)
        elif control is not None and self.attempt > 0:
            # A relaunch after a failure that came before the first checkpoint (one every
            # checkpoint_every_s): it trains again from the top, which the log should say.
            every = environment.checkpoint_every_s
            environment.say(
                f"restart {self.attempt}: no checkpoint was written before the failure (one"
                f" comes every {every:g} s, checkpoint_every_s), so training starts from the"
                " top"
            )
        if control is not None:
            control.hello(self.step)
        # A script that ends without finishing (an exception, a `return` out of its loop)
        # keeps what it reported, and the daemon learns the steps it completed; one that
        # reports after its last epoch keeps that too. Through a weak reference: the hook
        # must not keep a job (its model, its loaders) alive in a process that makes more.
        atexit.register(_at_exit, weakref.ref(self))

    def _resume(self, restored: Mapping[str, Any], newest: Path | None) -> None:
        """Take the position a checkpoint kept, and say where the run goes on from."""
        self.step = int(restored["step"])
        self._epochs.epoch = int(restored["epoch"])
        set_rng(restored["rng"])
        self._reports.count = int(restored.get("reports", 0))  # a script with no loader
        self.steps_cursor = int(restored.get("steps_cursor", 0))
        args = restored.get("args")
        other = (
            ", a run of this script with other arguments" if args and args != args_digest() else ""
        )
        self._run.say(
            f"resuming from {newest} (epoch {self._epochs.epoch}, step {self.step}{other})"
        )

    @property
    def step(self) -> int:
        """Batches this rank has trained, over every attempt."""
        return self._run.step

    @step.setter
    def step(self, value: int) -> None:
        self._run.step = value

    @property
    def resumed(self) -> bool:
        """Whether this run goes on from a checkpoint."""
        return self._restored is not None

    @property
    def allocation(self) -> Allocation:
        """What the scheduler gives the job now (standalone: no decoder, the script's own
        worker counts)."""
        return self._run.allocation

    def on_allocation(self, callback: Callable[[Allocation], None]) -> None:
        """Call `callback(allocation)` on every rank when the scheduler changes the job's
        allocation: at the batch boundary where a pause's resume comes, before any loader
        starts its next DataLoader (so what the callback changes in a dataset, such as where
        it decodes, reaches the new workers), and at the boundary where a live change of
        the decoder share comes (no pause, no new DataLoader)."""
        self._run.on_allocation.append(callback)

    # ---- the script's side -------------------------------------------------------------

    def phase(self, name: str) -> PhaseScope:
        """Say what the script is doing outside its training batches (`tokenising`,
        `evaluation`, `saving`, ...): `stoker show` and the dashboard show it, and however
        long it takes the daemon never takes it for a hang. `with job.phase("..."):` gives
        the phase before back at the end; a plain call lasts until the next training batch.
        The SDK says `setup`, `training`, `evaluation` (an evaluation loader's pass) and
        `saving` (a checkpoint) itself."""
        return self._run.enter(name)

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
        check_batch(dataset, batch_size, self.world_size)
        made, new = self._loaders.make(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            num_workers=num_workers,
            evaluation=evaluation,
            dataloader_kwargs=dataloader_kwargs,
            boundary=self._run,
            epoch=self._epochs.epoch,
            late=bool(self._epochs.finished),
        )
        if new and self._run.control is not None:
            self._loaders.clock(made, self._run.control, self.step)
        return made

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
        return self._epochs.run(count, self._restored is not None)

    @property
    def in_epochs(self) -> bool:
        """Whether `job.epochs(n)` is running: its passes are epochs'."""
        return self._epochs.running

    @property
    def control(self) -> Control | None:
        """The link to the daemon on this rank (None standalone, or once finished)."""
        return self._run.control

    def fix_workers(self) -> None:
        """Tell the daemon the job has no loader workers it can change (`job.steps`): none
        at all, unless a `job.loader` of its own has some."""
        if self._run.control is not None:
            self._run.control.fix_workers(self.step, loaderless=not self._loaders.made)

    def finish(self) -> None:
        """Training is done: the final checkpoint, and `finished` to the daemon."""
        self._run.finish()

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
        return self._epochs.planned_iterations()

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
        run, loaders = self._run, self._loaders.made
        counted = run.step if loaders or run.step else None
        self._reports.record(
            step, metrics, counted=counted, at_once=run.trained, flush_due=not loaders
        )

    def should_stop(self) -> bool:
        """For loops that do not iterate `job.loader`: whether to checkpoint and leave now
        (a signal came, on any rank)."""
        return self._run.agree(self._run.stop_signal is not None)[0]

    def checkpoint(self) -> Path | None:
        """Write a checkpoint now (rank 0 writes; every rank calls); its path on rank 0."""
        return self._run.checkpoint()

    # ---- the loaders' and the signals' side (agents/boundary.py) ------------------------

    def on_batch(self, samples: int, refill: bool = False, evaluation: bool = False) -> None:
        """A batch of `samples` (all ranks) went to the script (`BatchBoundaries.on_batch`)."""
        self._run.on_batch(samples, refill, evaluation)

    def step_ended(self) -> None:
        """The script came back after an epoch's last batch (`BatchBoundaries.step_ended`)."""
        self._run.step_ended()

    def at_boundary(self) -> None:
        """Between two batches: flush, stop or checkpoint (`BatchBoundaries.at_boundary`)."""
        self._run.at_boundary()

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        """SIGINT or SIGTERM: stop at the next batch boundary (`BatchBoundaries.on_signal`)."""
        self._run.on_signal(signum, frame)

    def _checkpoint_state(self) -> dict[str, Any]:
        # A checkpoint of the script's own between its first loader's last batch and the
        # next epoch (its end-of-epoch code), inside `job.epochs`: a resumed run starts the
        # next epoch, under its number, as one stopped at that boundary does.
        driving = self.in_epochs
        positions = [loader.saved_position(advance=driving) for loader in self._loaders.made]
        epoch = self._epochs.epoch
        if positions and driving:
            epoch = max(epoch, positions[0].epoch)
        return sdk_state(
            step=self.step,
            epoch=epoch,
            positions=positions,
            tracked=self._tracked,
            reports=self._reports.count,
            steps_cursor=self.steps_cursor,
            final=self._run.final,
        )


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
        job._run.say(
            f"under the daemon, job.output_dir is {environment.output_dir}, not"
            f" {output_dir} (stoker.init(output_dir=...) is for runs without it)",
            afresh=False,
        )
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, job.on_signal)
    return job


def _connect(environment: JobEnvironment) -> Control | None:
    """The link to the daemon that launched the job; None without one."""
    if environment.job_id is None or environment.control is None:
        return None
    return Control(
        job_id=environment.job_id,
        endpoint=environment.control,
        gen=environment.gen,
        heartbeat_s=environment.heartbeat_s,
        rank=environment.rank,
        world_size=environment.world_size,
        job_dir=environment.job_dir or environment.output_dir,
        allocation=environment.allocation,
        paused_at=environment.paused_at,
    )


def _device(local_rank: int) -> torch.device:
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _at_exit(job: "weakref.ref[Job]") -> None:
    """The interpreter's exit: the job's boundaries' `at_exit`, if the job is still there."""
    alive = job()
    if alive is not None:
        alive._run.at_exit()
