"""The SDK's side of the agent protocol (docs/agents.md), when a daemon runs the job: hello,
heartbeats, and the daemon's pause, resume, share and cancel, handled at batch boundaries.

Rank 0 holds the link; every rank learns what it heard at the same boundary (a broadcast),
so the ranks pause, resize or stop together. A pause is a checkpoint, `paused`, and a wait
for `resume`, whose allocation the job takes from the next batch on (a hot resize: the
process and the model stay), or, for a job that resizes cold, an exit after `paused` (the
daemon starts it again with the new allocation). The first step after either says
`resumed` with the gap. A live `share` changes the allocation at the next boundary, with
no pause. A cancel is a checkpoint and an exit with status 0, the job's iteration kept.
"""

import functools
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from agents.agentmessages import (
    AgentState,
    FinishedMessage,
    HeartbeatMessage,
    Hello,
    PausedMessage,
    ResumedMessage,
)
from agents.daemonmessages import CancelMessage, PauseMessage
from agents.heartbeat import LoaderRates, Meter, loader_rates, training_rates
from agents.link import DaemonLink
from agents.loaderclock import Clocked
from agents.metricsmessages import metrics_messages
from agents.protocol import write_finished_marker, write_last_step_marker
from allocator.types import DecodeMode

_NO_SHARE = -1  # broadcast for "no live share change at this boundary"
# The phases the SDK itself says (`AliveMessage`); a script may name its own (`job.phase`).
SETUP = "setup"  # from `stoker.init()` to its first training batch
TRAINING = "training"
EVALUATION = "evaluation"  # an evaluation loader's pass
SAVING = "saving"  # writing a checkpoint


def _millionths(share: float) -> int:
    """A share as an integer, so that a broadcast carries it exactly enough."""
    return round(share * 1e6)


class Decision(IntEnum):
    GO = 0
    PAUSE = 1
    CANCEL = 2


_LAST_VERSION = 7  # the protocol version that brought the heartbeat's `last`
_DECISIONS = tuple(Decision)  # by value
_GO = Decision.GO  # a global: an enum's attribute costs ~10 us in cold code


@dataclass(frozen=True)
class Allocation:
    """What the scheduler gives a job now: its loader workers per rank (None: the script's
    own count, when no scheduler says), and its part of the node's decoder device: a share
    of its capacity, and whether the job decodes there (`device`) or on its CPU workers."""

    workers_per_rank: int | None = None
    decoder_share: float = 0.0
    decode_mode: DecodeMode = "cpu"


class Control:
    """The link to the daemon, on every rank (only rank 0 talks)."""

    def __init__(
        self,
        *,
        job_id: str,
        endpoint: str,
        gen: int,
        heartbeat_s: float,
        rank: int,
        world_size: int,
        job_dir: Path,
        allocation: Allocation,
        paused_at: float | None = None,
    ) -> None:
        self.job_id = job_id
        self.gen = gen
        self.heartbeat_s = heartbeat_s
        self.rank, self.world_size = rank, world_size
        self.job_dir = job_dir
        # Its own thread says the process lives every heartbeat period, whatever the
        # training thread is doing; the script starts in its setup.
        self.link = DaemonLink(job_id, endpoint, heartbeat_s, SETUP) if rank == 0 else None
        self.allocation = allocation
        self._meter = Meter()
        self._handed_out = time.monotonic()
        # The samples a step of the job's first loader takes, all ranks: its global batch
        # (`Job.loader` sets it; an evaluation loader's steps may be larger).
        self.batch_samples = 0
        self._paused_at = paused_at  # a cold resize's relaunch: when its predecessor paused
        self._phase = SETUP  # on ranks without the link
        self.resizable = True
        self._loaderless = False  # `job.steps` without a loader: it holds no workers
        # The job's first loader's worker time so far, and at the last heartbeat
        # (agents/loaderclock.py, LoaderClock).
        self.loader_clock: Callable[[], Clocked] | None = None
        self.loader_workers: Callable[[], int] | None = None  # that loader's workers now
        # The step the job will end at, as `job.epochs(n)` and its loader count it (0: unknown).
        self.planned_iterations: Callable[[], int] | None = None
        self._clocked = Clocked()
        # Only where the job trains on CPUs do its training thread's clocks say its pace: on
        # a GPU its step is the GPU's, however long the thread waits for a core meanwhile.
        self._trains_on_cpus = not torch.cuda.is_available()

    @property
    def workers(self) -> int:
        return self.allocation.workers_per_rank or 0

    @property
    def share(self) -> float:
        return self.allocation.decoder_share

    def hello(self, iteration: int, state: AgentState = "running") -> None:
        if self.link is not None:
            self.link.send(
                Hello(
                    job=self.job_id,
                    gen=self.gen,
                    pid=os.getpid(),
                    state=state,
                    iteration=iteration,
                    workers=self.workers,
                    share=self.share,
                    resizable=self.resizable,
                )
            )

    def fix_workers(self, iteration: int, *, loaderless: bool = False) -> None:
        """A loader cannot change its workers (an iterable dataset), or, `loaderless`, the
        job has none (`job.steps`): say so, so that the scheduler plans around the job,
        never pauses it, and counts no loader process for one without a loader."""
        news = self.resizable or (loaderless and self.allocation.workers_per_rank != 0)
        if loaderless:
            self._loaderless = True
            self.allocation = replace(self.allocation, workers_per_rank=0)
        if news:  # said once
            self.resizable = False
            self.hello(iteration)

    @property
    def phase(self) -> str:
        return self._phase

    def set_phase(self, phase: str) -> None:
        """The script is now in `phase` (said to the daemon at once). Back in training, the
        time spent elsewhere (an evaluation, a save, the script's own) is no step and no
        wait for data: the next heartbeat measures from here. (The setup before the first
        batch stays in the first heartbeat, as the loaders' start: the core takes that one
        for warming up, and it says at once where the job ends.)"""
        if phase == self.phase:
            return
        before, self._phase = self._phase, phase
        if self.link is not None:
            self.link.set_phase(phase)
        if phase == TRAINING and before != SETUP:
            self._meter, self._handed_out = Meter(), time.monotonic()

    def on_batch(self, samples: int, refill: bool = False) -> None:
        """A batch of `samples` (all ranks) went to the script: the wait for it was idle
        time, and with `refill` (a pass's first batch) the pipeline filling."""
        now = time.monotonic()
        meter = self._meter
        meter.idle_s += now - self._handed_out
        if refill:
            meter.refill_s += now - self._handed_out
        meter.samples += samples
        self._handed_out = now

    def at_boundary(self, iteration: int, samples: int) -> Decision:
        """The script is back for a batch: its step is done. Heartbeat when due, say
        `resumed` after a pause's first step, and learn what the daemon wants: a pause or a
        cancel is the answer, a live share change shows in `allocation`."""
        now = time.monotonic()
        meter = self._meter
        meter.step_s += now - self._handed_out
        meter.steps += 1
        self._handed_out = now
        decision, share = _GO, _NO_SHARE
        link = self.link
        if link is not None:
            link.iteration = iteration  # what its `alive` says during a long evaluation
        # Most boundaries end here: nothing came, no heartbeat is due (a few attribute reads;
        # code run right after a step finds the caches cold, so every line counts).
        if link is not None and (
            link.attention or now - meter.started >= self.heartbeat_s or self._paused_at
        ):
            decision, share = self._attend(link, iteration, samples)
        if self.world_size > 1:
            decided, share = self._broadcast([int(decision), share])
            decision = _DECISIONS[decided]  # not Decision(decided): an enum call is slow
        if share != _NO_SHARE:
            self.allocation = replace(self.allocation, decoder_share=share / 1e6)
        return decision

    def _attend(self, link: DaemonLink, iteration: int, samples: int) -> tuple[Decision, int]:
        """Rank 0 at a boundary with something to do: say `resumed` after a pause's first
        step, hello to a restarted daemon, the heartbeat when due; and what the daemon
        sent: a pause or a cancel (the decision), a live share (in millionths)."""
        if self._paused_at is not None:
            self._resumed(time.time() - self._paused_at)
        if link.reconnected():  # a restarted daemon re-attaches the job from its hello
            self.hello(iteration)
        self._heartbeat(iteration, samples)
        decision, share = Decision.GO, _NO_SHARE
        stop = link.next_stop()
        if (live := link.take_share()) is not None:
            share = _millionths(live)
        if isinstance(stop, PauseMessage):
            decision, self.gen = Decision.PAUSE, stop.gen
            self._paused_at = time.time()  # `resumed` counts its gap from here
        elif isinstance(stop, CancelMessage):
            decision = Decision.CANCEL
        return decision, share

    def paused(
        self, iteration: int, checkpoint: Path | None, *, wait: bool = True
    ) -> Allocation | None:
        """Say `paused` with the checkpoint and, unless told not to (a cold resize leaves
        now), wait for the resume: the new allocation, or None when cancelled."""
        answer = [0, 0, 0]  # workers per rank (0: cancelled), share in millionths, on device
        if self.link is not None:
            self.link.send(
                PausedMessage(
                    job=self.job_id,
                    gen=self.gen,
                    iteration=iteration,
                    checkpoint=str(checkpoint or ""),
                )
            )
            if not wait:
                return None
            resume = self.link.wait_for_resume(lambda: self.hello(iteration, "paused"))
            if resume is not None:
                self.gen = resume.gen
                device = int(resume.decode_mode == "device")
                answer = [resume.workers_per_gpu, _millionths(resume.decoder_share), device]
        elif not wait:
            return None
        workers, share, device = self._broadcast(answer)
        self._meter, self._handed_out = Meter(), time.monotonic()
        if workers == 0:
            return None
        held = 0 if self._loaderless else workers  # a loaderless job's resume says 1
        self.allocation = Allocation(held, share / 1e6, "device" if device else "cpu")
        return self.allocation

    def report(self, rows: Sequence[tuple[int, Mapping[str, Any]]]) -> None:
        """Send what the script reported (numbers only; names cut to the protocol's limits),
        in messages that stay under the protocol's size limit, built on the link's thread."""
        if self.link is not None:
            self.link.send_built(functools.partial(metrics_messages, self.job_id, self.gen, rows))

    def finished(self, iteration: int) -> None:
        """The final step is done: the marker first (a daemon that is down learns from
        it), then `finished`."""
        if self.link is not None:
            write_finished_marker(self.job_dir, iteration)
            self.link.send(FinishedMessage(job=self.job_id, gen=self.gen, iteration=iteration))

    def last_step(self, iteration: int, samples: int, signal: int | None = None) -> None:
        """The script is exiting without finishing: tell the daemon the steps it completed
        (a daemon that knows relaunches a job that crashed after making progress, and says
        at which step it failed), and the stop `signal` it caught, if one came. Nothing
        measured goes with it."""
        link = self.link
        if link is None:
            return
        write_last_step_marker(self.job_dir, iteration, signal)  # its exit may be read first
        if link.version < _LAST_VERSION:
            return
        last = HeartbeatMessage(
            job=self.job_id,
            gen=self.gen,
            iteration=iteration,
            samples=samples,
            idle_s=0.0,
            step_s=0.0,
            samples_per_s=0.0,
            workers=self.workers,
            share=self.share,
            last=True,
        )
        link.send(last)

    def close(self) -> None:
        if self.link is not None:
            self.link.close()
            self.link = None

    def _resumed(self, gap_s: float) -> None:
        assert self.link is not None
        self.link.send(
            ResumedMessage(
                job=self.job_id,
                gen=self.gen,
                workers=max(1, self.workers),
                share=self.share,
                gap_s=max(0.0, gap_s),
            )
        )
        self._paused_at = None

    def _heartbeat(self, iteration: int, samples: int) -> None:
        meter = self._meter
        busy = meter.idle_s + meter.step_s
        # Outside training (an evaluation's batches) nothing measured is the job's training
        # rate: its link's `alive` says it lives meanwhile.
        if self.link is None or busy < self.heartbeat_s or self._phase != TRAINING:
            return
        # The samples of this interval over its time (not this run's samples per step of
        # every run: after a restart from a checkpoint that read a hundredth of the rate).
        rate = meter.samples / busy if busy > 0 else 0.0
        loader = LoaderRates()
        # A loader without workers loads in this process: its CPU time is all of the job's.
        timed = self.loader_workers is not None and self.loader_workers() == 0
        if self.loader_clock is not None:  # a worker's seconds per sample this interval
            clocked, then = self.loader_clock(), self._clocked
            self._clocked = clocked
            measured = loader_rates(clocked, then, self.link.version)
            if measured is not None:
                loader, timed = measured, True
        cpu_s, train_cpu_s, train_wait_s = training_rates(
            meter, self.world_size, timed, loader.cpu_seconds, self._trains_on_cpus
        )
        heartbeat = functools.partial(
            HeartbeatMessage,
            job=self.job_id,
            gen=self.gen,
            iteration=iteration,
            samples=samples,
            idle_s=meter.idle_s,
            step_s=meter.step_s,
            samples_per_s=rate,
            workers=self.workers,
            share=self.share,
            loader_s=loader.seconds,
            loader_cpu_s=loader.cpu_seconds,
            loader_wait_s=loader.wait_seconds,
            cpu_s=cpu_s,
            train_cpu_s=train_cpu_s,
            train_wait_s=train_wait_s,
            refill_s=meter.refill_s,
            total_iterations=self.planned_iterations() if self.planned_iterations else 0,
            batch_samples=self.batch_samples,
        )
        self.link.send_built(lambda: [heartbeat()])  # validated on the link's thread
        self._meter = Meter()

    def _broadcast(self, values: list[int]) -> list[int]:
        """Rank 0's values on every rank."""
        if self.world_size == 1:
            return values
        tensor = torch.tensor(values, dtype=torch.int64)
        dist.broadcast(tensor, src=0)
        return [int(value) for value in tensor.tolist()]
