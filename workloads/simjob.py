"""One simulated job as the node simulator keeps it: where its processes are in their life
(`JobPhase`), its random draws (`Draws`), and what it has trained (`SimJob`).

The simulator's other modules read and write these records: `simnode` runs them at the
truth's rates, `simagents` speaks for their agents, `simcommands` carries the core's
commands out on them. Nothing here decides anything.
"""

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from allocator.curvefit import Knee
from allocator.types import DecodeMode
from scheduler.messages import Allocation, Launch
from workloads.spec import WorkloadJob
from workloads.truth import MeasuredCurve


class JobPhase(Enum):
    WAITING = "waiting"  # arrived, no GPUs yet
    SUBMITTED = "submitted"  # handed to the core, not launched (or its process gone, relaunch due)
    STARTING = "starting"
    RUNNING = "running"
    PAUSING = "pausing"  # stopped at an iteration boundary, writing its checkpoint
    PAUSED = "paused"
    RESUMING = "resuming"
    DONE = "done"


# Where the job has processes on the node (a cold-resize job's exit after its pause aside).
_WITH_PROCESSES = frozenset(
    {JobPhase.STARTING, JobPhase.RUNNING, JobPhase.PAUSING, JobPhase.PAUSED, JobPhase.RESUMING}
)

# The progress milestones a running job reaches at a given step: its end and its incidents.
FINISH, CRASH, SILENT, STALL = "finish", "crash", "silent", "stall"


class Draws:
    """One job's random draws: a stream per kind (its launch, pause and resume costs, its
    heartbeats' noise, its loader timing), each seeded by (run seed, job, kind). A job's
    n-th pause then costs the same under every policy of a seed (common random numbers):
    two policies' runs differ by what they decided, not by which draws of one shared stream
    their events happened to meet."""

    def __init__(self, seed: int, job_id: str) -> None:
        self._key = f"{seed} {job_id}"
        self._streams: dict[str, random.Random] = {}

    def stream(self, kind: str) -> random.Random:
        rng = self._streams.get(kind)
        if rng is None:
            rng = self._streams[kind] = random.Random(f"{kind} {self._key}")
        return rng


@dataclass
class SimJob:
    spec: WorkloadJob
    flops: float
    model_params: float
    step_time_s: float  # true, unshared, noise included
    draws: Draws
    hot_resize: bool  # a pause resizes it in place; else its process exits and is relaunched
    curve: MeasuredCurve | None = None  # the job's own measured curve, when it brings one
    knee: Knee | None = None  # that curve as the planner's knee (what `oracle` plans with)
    gpu_indices: tuple[int, ...] = ()
    placed: bool = False  # it counts on its GPUs (the oracle's sharing) until its processes end
    phase: JobPhase = JobPhase.WAITING
    workers_per_gpu: int = 0
    decoder_share: float = 0.0  # > 0: the decoder decodes for it (device mode)
    gen: int = 0
    done_iterations: float = 0.0
    checkpoint: int = 0  # the step its last checkpoint (a pause's) holds: a relaunch's start
    rate: float = 0.0  # iterations per second now
    version: int = 0  # bumps invalidate the job's scheduled milestone
    pause_started: float = 0.0
    start_s: float | None = None
    end_s: float | None = None
    busy_gpu_s: float = 0.0  # GPU-seconds of computing, from the truth's step time
    paused_s: float = 0.0
    workers: list[list[float]] = field(default_factory=list)
    # Its incidents (WorkloadJob.crash_at and the rest): those it has had, each once.
    happened: set[str] = field(default_factory=set)
    in_setup: bool = False  # after its hello, before its first step: alive, no progress
    setup_until: float = 0.0
    stalled: bool = False  # its link speaks, its steps do not come
    silent: bool = False  # hung: no step and no word
    # What its processes' exit says (as the SDK's markers and the exit code tell the daemon):
    # the final step it finished at, and whether the daemon stopped them (a signal).
    finished_at_step: int | None = None
    stopped: bool = False
    # Its launch being carried out, and how many of its launches the node was short for
    # (WorkloadJob.launch_short): the core tries such a launch again.
    launch: Launch | None = None
    launches_short: int = 0

    @property
    def batch_size_per_gpu(self) -> float:
        return self.spec.batch_size / self.spec.gpus

    @property
    def has_processes(self) -> bool:
        """Whether processes of the job run on the node now (a cold-resize job's end after
        its pause: none until its relaunch)."""
        if self.phase is JobPhase.PAUSED and not self.hot_resize:
            return False
        return self.phase in _WITH_PROCESSES

    @property
    def idle(self) -> bool:
        """Running, but not stepping: in its setup, stalled or hung."""
        return self.in_setup or self.stalled or self.silent

    def next_milestone(self) -> tuple[str, int]:
        """The next step at which something happens to the job: an incident it has not had
        yet, else its final step."""
        spec = self.spec
        incidents = ((CRASH, spec.crash_at), (SILENT, spec.silent_at), (STALL, spec.stall_at))
        pending = [
            (at, kind) for kind, at in incidents if at is not None and kind not in self.happened
        ]
        at, kind = min(pending, default=(spec.iterations, FINISH))
        return kind, at


def device_share(allocation: Allocation) -> float:
    """The decoder share `allocation` gives, 0 unless the device decodes for the job."""
    mode: DecodeMode = allocation.decode_mode
    return allocation.decoder_share if mode == "device" else 0.0


def loader_processes(jobs: Iterable[SimJob]) -> int:
    """The loader processes `jobs` run: their GPUs times their workers per GPU."""
    return sum(job.spec.gpus * job.workers_per_gpu for job in jobs)
