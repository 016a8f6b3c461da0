"""What flows out of the scheduler core: commands the adapters carry out (launch, pause,
resume, a live share change, cancel, a placement) and records of what happened, for the
event log, with nothing to carry out. All frozen; nothing is decided by reading a string."""

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from allocator import AllocationPlan, AllocationRequest, JobSpec
from allocator.types import DecodeMode
from scheduler.exits import AfterEnd
from scheduler.reasons import Ending, MessageKind, StateReason, StopReason
from scheduler.states import JobState

# ---- commands ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Allocation:
    """One job's share of the node as a command carries it."""

    workers_per_gpu: int
    decoder_share: float = 0.0
    decode_mode: DecodeMode = "cpu"


@dataclass(frozen=True)
class Launch:
    job_id: str
    gen: int
    allocation: Allocation
    resume_from: str = ""  # checkpoint to start from, when relaunched


@dataclass(frozen=True)
class Pause:
    job_id: str
    gen: int


@dataclass(frozen=True)
class Resume:
    job_id: str
    gen: int
    allocation: Allocation
    # Set: the job paused cold at that time (epoch s) and its processes exited; the resume
    # is a relaunch from its checkpoint, its pause gap measured from then. None: in place.
    cold_paused_at: float | None = None


@dataclass(frozen=True)
class SetShare:
    """A live change of a running job's decoder share: no pause, same workers and mode."""

    job_id: str
    gen: int
    decoder_share: float


@dataclass(frozen=True)
class Cancel:
    job_id: str


@dataclass(frozen=True)
class StopProcesses:
    """Stop the processes of a job that ended (its process group), as `reason` says: told
    to stop and still up after the grace, a completed job's past `finished_exit_s`, or a
    cancel of its work after its end (`by` who asked)."""

    job_id: str
    reason: StopReason
    by: str = ""


@dataclass(frozen=True)
class StepsKept:
    """The steps an exit's markers say the job completed, for the store, before its end
    is recorded: its finished marker's final step (written as is), or, `if_later`, the
    step a cancelled job stopped at (its checkpoint's; written only past the stored one)."""

    job_id: str
    iteration: int
    if_later: bool = False


@dataclass(frozen=True)
class ExitNoted:
    """A job's processes exited, for its event log: its exit code, how its work after its
    final step ended (`after_end`, None: no such work failed or was stopped), how long after
    its final step it exited (`since_s`, None: not known), and, when that work failed, the
    daemon's account of the exit (`said`: opaque)."""

    job_id: str
    code: int | None
    after_end: AfterEnd | None = None
    since_s: float | None = None
    said: str = ""


@dataclass(frozen=True)
class Placed:
    """Admission gave the job these GPUs (or CPU training slots); it now waits in the
    arrival buffer. The adapters keep the placement with the job."""

    job_id: str
    gpu_indices: tuple[int, ...]


# ---- records: what happened, for the event log; nothing to carry out -------------------


@dataclass(frozen=True)
class StateChanged:
    """A job moved along the transition table. `old` is None for a job the core took over
    from an earlier daemon (`Reattached`). `iteration`: the steps it had completed, as
    the core last heard. `reason`: why, where anything is said; `ending`: why it ended (an
    end), or why its attempt did (a restart, relaunched after `wait_s` as its `restarts`th)."""

    job_id: str
    old: JobState | None
    new: JobState
    reason: StateReason | None = None
    iteration: int = 0
    ending: Ending | None = None
    restarts: int = 0
    wait_s: float = 0.0


@dataclass(frozen=True)
class Queued:
    """The job was placed and entered the arrival buffer."""

    job_id: str
    gpus: int


@dataclass(frozen=True)
class RanUnmanaged:
    """A command said no hello: it runs without the SDK, its workers fixed, never paused
    (`unmanaged` False: a slow one said hello after all). Kept with the job, so that a
    restarted daemon adopts one without the SDK as it runs, with no hello to wait for."""

    job_id: str
    unmanaged: bool = True


@dataclass(frozen=True)
class HelloNoted:
    """An agent said hello again while its job was past starting (a reconnect)."""

    job_id: str
    gen: int
    state: JobState


@dataclass(frozen=True)
class StaleMessage:
    """A message that came too late to matter: an older generation, or a job that ended."""

    job_id: str
    kind: MessageKind
    gen: int | None = None


@dataclass(frozen=True)
class Restarting:
    """The job's agent died and its restart policy relaunches it; `ending`: why its
    attempt ended."""

    job_id: str
    restarts: int
    ending: Ending


@dataclass(frozen=True)
class LaunchRetrying:
    """The node was short for the job's launch (`LaunchFailed`): the same launch is tried
    again after `pause_s`, its `tries`th failure since the core launched it; `said`: the
    daemon's account of the failure (opaque)."""

    job_id: str
    tries: int
    pause_s: float
    said: str


@dataclass(frozen=True)
class HelloMissed:
    """A job `Restored` for its agent's hello heard none within its `hello_within_s`: the
    daemon decides what it is now (scheduler/restore.py `after_silence`): taken over running
    without the SDK, found ended, or relaunched, given back (`Released`) either way. It is
    awaited (`Scheduler.awaiting_hello`) until then."""

    job_id: str


@dataclass(frozen=True)
class Stalled:
    """A running job made no progress (no step, no new phase) for `silent_s`, its stall
    limit (`stalled` True), or moved again after it was reported (`stalled` False)."""

    job_id: str
    stalled: bool
    silent_s: float = 0.0
    phase: str = ""


@dataclass(frozen=True)
class Planned:
    """A round's plan, generation `gen`."""

    gen: int
    plan: AllocationPlan


class GateChoice(StrEnum):
    """What the reallocation gate did with a change the plan asked of a running job."""

    CHANGE = "change"  # it pays: pause and resize
    KEEP = "kept"  # it does not pay: the job keeps its allocation
    FORCED = "forced"  # it does not pay, but the plan does not fit unless the job shrinks
    HELD = "held"  # it pays, but less than the shrinks it needs would cost the jobs that shrink


@dataclass(frozen=True)
class GateVerdict:
    choice: GateChoice
    saved_s: float = 0.0  # time the change saves over the job's remaining work
    needed_s: float = 0.0  # its pause cost with the hysteresis margin

    def __str__(self) -> str:
        if self.choice is GateChoice.FORCED:
            return "forced: the plan does not fit unless it shrinks"
        compared = f"saves {self.saved_s:.1f} s"
        if self.choice is GateChoice.KEEP:
            return f"kept: {compared} <= pause cost {self.needed_s:.1f} s"
        if self.choice is GateChoice.HELD:
            return f"held: {compared}, less than the shrinks it needs cost the others"
        return f"{compared} > pause cost {self.needed_s:.1f} s"


@dataclass(frozen=True)
class Gated:
    """The gate's verdict on each running job the plan of generation `gen` would change."""

    gen: int
    verdicts: Mapping[str, GateVerdict]

    @property
    def kept(self) -> int:
        left = (GateChoice.KEEP, GateChoice.HELD)
        return sum(verdict.choice in left for verdict in self.verdicts.values())


@dataclass(frozen=True)
class Replanned:
    """After a pause timeout, the round's flexible jobs planned again on what was left."""

    gen: int
    plan: AllocationPlan


@dataclass(frozen=True)
class CurveRefused:
    """A job whose learned curve a plan refused (scheduler/guard.py): it is planned on its
    prior and learns again from its next heartbeats. The policy's failure on it: the
    exception's type name, and its own text (opaque)."""

    job_id: str
    raised: str
    raised_said: str


@dataclass(frozen=True)
class PlanWork:
    """What a plan is made of: the request, the policy, and each job's prior (None where
    it plans on its prior already), which a learned curve the policy refuses falls back to
    (scheduler/guard.py)."""

    request: AllocationRequest
    policy: str
    priors: tuple[JobSpec | None, ...]


@dataclass(frozen=True)
class PlanNeeded:
    """Make the plan `work` describes where the core's events keep flowing (a worker
    thread in the daemon, at once in the simulator), and hand it back as `PlanMade` with
    this `ticket` (scheduler/planning.py's `work_out` makes it)."""

    ticket: int
    work: PlanWork


@dataclass(frozen=True)
class PlanAbandoned:
    """The plan asked for with `ticket` was not made within `plan_timeout_s` (`waited_s`):
    the core no longer waits for it and asks again; whatever was making it may be stopped."""

    ticket: int
    jobs: int
    waited_s: float


@dataclass(frozen=True)
class PlanOutcome:
    """A plan made: the plan and the jobs put back on their priors, or what the policy
    raised on the priors alone (`error`, with no plan)."""

    plan: AllocationPlan | None
    refused: tuple[CurveRefused, ...] = ()
    error: Exception | None = None


Record = (
    StateChanged
    | Queued
    | HelloNoted
    | RanUnmanaged
    | StaleMessage
    | Restarting
    | LaunchRetrying
    | Stalled
    | Planned
    | Gated
    | Replanned
    | CurveRefused
)
# What an ended job's processes come to: stopped, their exit's steps and note.
ExitCommand = StopProcesses | StepsKept | ExitNoted
Command = (
    Launch
    | Pause
    | Resume
    | SetShare
    | Cancel
    | Placed
    | ExitCommand
    | HelloMissed
    | PlanNeeded
    | PlanAbandoned
    | Record
)
