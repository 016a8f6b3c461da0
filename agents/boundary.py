"""What happens between two batches (the SDK's pause state machine): the job's step count
and phase, the daemon's pause and cancel (a checkpoint, then a wait for the resume's
allocation, or an exit), a live change of the decoder share, Ctrl-C and SIGTERM (a
checkpoint at the next boundary, then an exit), the periodic checkpoint, the final one
and the job's last word at the interpreter's exit.

With several ranks every rank decides the same at the same boundary: what the daemon said
reaches them all (agents/control.py broadcasts it), and a stop or a due checkpoint is
agreed with one small all-reduce. The loaders call `on_batch`, `step_ended` and
`at_boundary` (agents/loader.py's `Boundary`); `Job` (agents/sdk.py) is the script's face.
"""

import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

from agents import checkpoints
from agents.control import EVALUATION, SAVING, SETUP, TRAINING, Allocation, Control, Decision
from agents.environment import JobEnvironment
from agents.jobloaders import JobLoaders
from agents.phases import PhaseScope
from agents.reports import METRICS_FLUSH_S, Metrics


class BatchBoundaries:
    """One job's batch boundaries, on every rank; `state()` is what its checkpoints keep."""

    def __init__(
        self,
        environment: JobEnvironment,
        *,
        device: torch.device,
        control: Control | None,
        metrics: Metrics,
        loaders: JobLoaders,
        state: Callable[[], dict[str, Any]],
    ) -> None:
        self.environment = environment
        self.rank, self.world_size = environment.rank, environment.world_size
        self.device = device
        self.control = control  # the link to the daemon on this rank; None standalone or done
        self.metrics = metrics
        self.loaders = loaders
        self.state = state
        self.step = 0  # batches this rank has trained, over every attempt
        self.samples = 0  # consumed by all ranks, this run
        self.in_step = False  # the script has its batch and has not come back for the next
        # What the script is doing: training once its first training batch came; an
        # evaluation loader's batches are no training steps.
        self.phase = SETUP
        self.training = False
        self.stop_signal: int | None = None
        self.trained = False  # training ended: no boundary will come to stop at
        self.final = False  # the next checkpoint is the one `epochs()` ends with
        self.last_checkpoint = time.monotonic()
        # The link's own object: a live change shows as another one there (`at_boundary`).
        self.allocation = control.allocation if control is not None else environment.allocation
        self.on_allocation: list[Callable[[Allocation], None]] = []

    def say(self, what: str, afresh: bool = True) -> None:
        """A line on stderr from rank 0; alone, with how to start afresh instead (a second
        run of a script in the same folder goes on from the first's checkpoints)."""
        self.environment.say(what, afresh_hint=afresh and self.control is None)

    # ---- the phase -----------------------------------------------------------------------

    def enter(self, name: str) -> PhaseScope:
        """`job.phase(name)`: the phase until the scope ends or the next training batch."""
        return PhaseScope(name, lambda: self.phase, self.back_to)

    def back_to(self, name: str) -> None:
        # A scope opened in the setup ends in training once training has begun.
        self.set_phase(TRAINING if name == SETUP and self.step else name)

    def set_phase(self, name: str) -> None:
        self.phase = name
        self.training = name == TRAINING
        if self.control is not None:
            self.control.set_phase(name)

    # ---- the loaders' side ---------------------------------------------------------------

    def on_batch(self, samples: int, refill: bool = False, evaluation: bool = False) -> None:
        """A batch of `samples` (all ranks) went to the script: one more step, unless an
        `evaluation` loader's (the job is in its evaluation phase until its next training
        batch). `refill`: the first batch of a pass, whose wait was the pipeline filling."""
        if evaluation:
            if self.phase != EVALUATION:
                self.set_phase(EVALUATION)
            return
        if not self.training:
            self.set_phase(TRAINING)
        self.step += 1
        self.in_step = True
        self.samples += samples
        if self.control is not None:
            self.control.on_batch(samples, refill)

    def step_ended(self) -> None:
        """The script came back after an epoch's last batch: that step is done; the
        boundary comes after the script's own end of the epoch."""
        self.in_step = False

    def at_boundary(self) -> None:
        """Between two batches: flush metrics, stop when asked (after a checkpoint), and
        checkpoint when it is time. Its usual path, nothing to do, is kept short: it runs
        once a step, right after the step, when the caches are cold (docs/results.md)."""
        self.in_step = False
        now = time.monotonic()
        if now - self.metrics.flushed_at >= METRICS_FLUSH_S:
            self.metrics.flush()
        control = self.control
        if control is not None:
            decision = control.at_boundary(self.step, self.samples)
            if control.allocation is not self.allocation:  # a live share change
                self.allocated(control.allocation, rebuild=False)
            if decision:  # a pause or a cancel (GO is 0: no enum looked up on the usual path)
                self._obey(control, decision)
        # Every rank must call checkpoint() at the same boundary (it ends in a barrier), so
        # the ranks agree on it as on a stop: one rank's clock says so for all.
        due = now - self.last_checkpoint >= self.environment.checkpoint_every_s
        stop = self.stop_signal is not None
        if self.world_size > 1:
            stop, due = self.agree(stop, due)
        if stop:
            self.leave()
        if due:
            self.checkpoint()

    def _obey(self, control: Control, decision: Decision) -> None:
        if decision is Decision.PAUSE:
            self._pause(control)
        elif decision is Decision.CANCEL:
            self.leave(cancelled=True)

    def on_signal(self, signum: int, _: FrameType | None) -> None:
        """SIGINT or SIGTERM: stop at the next batch boundary, after a checkpoint; after
        training (no boundary comes), exit now, as Python would: the exit hook keeps what
        the script reported."""
        if self.trained:
            raise SystemExit(128 + signum)
        self.stop_signal = signum

    # ---- pauses, stops and checkpoints ---------------------------------------------------

    def _pause(self, control: Control) -> None:
        """The daemon's pause: checkpoint, wait for the resume, and take its allocation
        from the next batch on (the loaders rebuild their DataLoaders). A job that resizes
        cold leaves after the checkpoint instead, with status 0."""
        path = self.checkpoint()
        self.metrics.flush()
        if self.environment.cold_resize:
            control.paused(self.step, path, wait=False)
            if self.rank == 0:
                print("stoker: cold resize: exiting after the checkpoint", file=sys.stderr)
            self.leave(cancelled=True, checkpointed=True)
            return
        allocation = control.paused(self.step, path)
        if allocation is None:
            self.leave(cancelled=True, checkpointed=True)
            return
        if allocation != self.allocation:
            self.allocated(allocation, rebuild=True)

    def allocated(self, allocation: Allocation, *, rebuild: bool) -> None:
        """Take a new allocation: the loaders' worker counts (and with `rebuild`, a new
        DataLoader each from the next batch on), then the script's callbacks."""
        self.allocation = allocation
        if rebuild:
            self.loaders.resize(allocation)
        for callback in self.on_allocation:
            callback(allocation)

    def leave(self, *, cancelled: bool = False, checkpointed: bool = False) -> None:
        """Checkpoint and exit: 0 when the daemon cancelled the job, 128 + the signal for
        a signal."""
        path = None if checkpointed else self.checkpoint()
        self.metrics.flush()
        self.loaders.close()
        if self.control is not None:
            # Where it stopped, at a boundary: a cancelled job's end (`stoker resume` goes on
            # from there), or a signalled one's progress; the link is closed before the exit.
            self.control.last_step(self.step, self.samples, self.stop_signal)
            self.control.close()
        if cancelled:
            raise SystemExit(0)
        signum = self.stop_signal or signal.SIGTERM
        if path is not None:
            print(f"stoker: stopped by signal {signum}; checkpoint {path}", file=sys.stderr)
        raise SystemExit(128 + signum)

    def agree(self, *mine: bool) -> list[bool]:
        """For each question, whether any rank says yes (one small all-reduce per call with
        several ranks)."""
        if self.world_size == 1:
            return list(mine)
        flags = torch.tensor([1.0 if yes else 0.0 for yes in mine], device=self.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        return [flag > 0 for flag in flags.tolist()]

    def checkpoint(self) -> Path | None:
        """Write a checkpoint now (rank 0 writes; every rank calls); its path on rank 0."""
        self.last_checkpoint = time.monotonic()
        self.metrics.flush()  # the series up to the checkpoint survives a crash with it
        path = None
        if self.rank == 0:
            with self.enter(SAVING):
                path = checkpoints.write(self.environment.checkpoint_dir, self.state())
        if self.world_size > 1:
            dist.barrier()
        return path

    def finish(self) -> None:
        """Training is done: the final checkpoint, and `finished` to the daemon."""
        self.final = True  # the checkpoint that ends it: a new run does not resume it
        self.checkpoint()
        self.metrics.flush()
        self.loaders.close()
        if self.control is not None:
            self.control.finished(self.step)
            # The job is done with the scheduler: no more boundaries, heartbeats or last
            # word. The link stays open for the metrics alone: what the script reports
            # after training (an evaluation's accuracy) is sent as it is reported
            # (`report`), and the job's exit hook (`at_exit`) closes the link.
            self.control = None
        self.trained = True  # after `finished`: a signal now ends a finished job
        if self.stop_signal is not None:  # one came during the final checkpoint
            raise SystemExit(128 + self.stop_signal)

    def at_exit(self) -> None:
        """At the interpreter's exit: write (and send) the metrics not flushed yet, and tell
        the daemon the steps the script completed (a step that raised is not one: a script
        that fails in its first step made no progress a relaunch could build on). After
        `finish`, the metrics still go to the daemon too, and nothing else does; after a
        pause or a signal left, the link is closed: they go to metrics.jsonl only."""
        # Exiting: a failure here is said, never raised over what ended the script, and a
        # signal now must not cut the flush short (the link's linger bounds it).
        self.trained = False
        try:
            self.metrics.flush()
        except Exception as error:
            print(f"stoker: at exit, the last metrics were not saved: {error!r}", file=sys.stderr)
        if self.control is not None:
            try:
                completed = self.step - 1 if self.in_step else self.step
                self.control.last_step(completed, self.samples, self.stop_signal)
            except Exception as error:
                print(f"stoker: at exit, the daemon was not told: {error!r}", file=sys.stderr)
        elif self.metrics.control is not None:  # finished: the link was open for these alone
            self.metrics.control.close()  # sends them (up to the link's linger)
