"""Why things happen to a job, as the core says it: enums, each with the typed details its
words need. Why a job ended (`EndReason`, with its details in `Ending`), why a failed job
is not relaunched (`RelaunchRefusal`, in `NotRelaunched`), why a job moved that is not an
end (`StateReason`), why a job waits (`WaitReason`, in `Waiting`), which message came too
late (`MessageKind`), why an ended job's processes are stopped (`StopReason`), and how a
launch failed (`LaunchFailure`). The core
decides on these, never on text; only the daemon turns them into words (daemon/wording.py).
Text a job itself sent is carried as opaque data (`Ending.said`), never read here."""

from dataclasses import dataclass
from enum import StrEnum


class StopReason(StrEnum):
    """Why the core stops an ended job's processes (`StopProcesses`)."""

    GRACE_OVER = "grace_over"  # told to stop (cancelled, failed, lost): still up after the grace
    OVERRAN = "overran"  # completed: still running `finished_exit_s` after its final step
    ASKED = "asked"  # completed, its processes running on: a cancel asked them stopped


class LaunchFailure(StrEnum):
    """Why a launch of a job's processes raised, as the daemon tells it (`LaunchFailed`)."""

    # The node was short (no file descriptors, memory or processes left; a cgroup error):
    # the same launch may succeed a moment later. Tried again, never the job's failure.
    SHORT = "short"
    # The launch was refused: its command cannot run, the installation is broken, a bug.
    # The job's failure (`EndReason.LAUNCH_FAILED`).
    REFUSED = "refused"


class EndReason(StrEnum):
    """Why a job ended, or, when it is relaunched, why its attempt did."""

    # Completed.
    FINISHED = "finished"  # its final step (its SDK's word, or exit 0 without the SDK)
    ENDED_OUTSIDE_EPOCHS = "ended_outside_epochs"  # an SDK script's own exit 0
    UNMANAGED_ENDED = "unmanaged_ended"  # adopted without the SDK: gone, no exit code
    ENDED_UNSEEN = "ended_unseen"  # without the SDK, it ended while no daemon watched
    # Failed, as told at the edge (`Ending.said` holds what was told).
    EXITED = "exited"  # its processes exited: the daemon's account (code, stderr tail)
    LAUNCH_FAILED = "launch_failed"  # its processes could not be started
    JOB_SAID = "job_said"  # its agent said it failed: the job's own text
    # Failed, as the core found.
    LOST = "lost"  # its link was silent past its heartbeat timeout
    NO_HELLO = "no_hello"  # launched, it never said hello
    STALLED = "stalled"  # no progress past its stall limit, with stall_action = fail
    # Cancelled.
    CANCELLED = "cancelled"  # someone asked (`Ending.by`)
    TIME_LIMIT = "time_limit"  # it ran its time_limit_s


class RelaunchRefusal(StrEnum):
    """Why a failed job is not relaunched."""

    NONE_LEFT = "none_left"  # its restart policy allows none (more): its failure says enough
    UNMANAGED = "unmanaged"  # without the SDK, its progress cannot be told
    BEFORE_FIRST_STEP = "before_first_step"  # it failed before its first step (since relaunch)
    FAILED_TWICE = "failed_twice"  # it failed twice after completing the same step
    FAILED_AGAIN_BEFORE = "failed_again_before"  # it failed again before its last failure


@dataclass(frozen=True)
class NotRelaunched:
    """Why a failed job stays failed, with the steps the words name."""

    refusal: RelaunchRefusal
    started_at: int | None = None  # BEFORE_FIRST_STEP: its relaunch's first step, if any
    step: int = 0  # FAILED_TWICE, FAILED_AGAIN_BEFORE: the steps it completed this time
    failed_at: int = 0  # FAILED_AGAIN_BEFORE: the step of its failure before


@dataclass(frozen=True)
class Ending:
    """Why a job ended (or its attempt, when relaunched), with what its words need."""

    reason: EndReason
    # EXITED, LAUNCH_FAILED, JOB_SAID: what was told of the failure where it happened (the
    # job's own exception text, or the daemon's account of its exit or launch). Opaque:
    # carried into the job's reason, never read by the core.
    said: str = ""
    by: str | None = None  # CANCELLED: who asked (a tenant), if said
    waiting: bool = False  # CANCELLED, TIME_LIMIT: it was still waiting for GPUs
    seconds: float = 0.0  # LOST: silent for; STALLED: without progress for
    limit_s: float = 0.0  # LOST, STALLED, TIME_LIMIT: the limit it passed
    phase: str = ""  # STALLED: the phase its script was in ("": unsaid)
    not_relaunched: NotRelaunched | None = None  # a failure that held resources, kept failed


class StateReason(StrEnum):
    """Why a job moved along the transition table, where anything is said."""

    ENDED = "ended"  # to a final state: `StateChanged.ending` says why
    RESTARTING = "restarting"  # failed, relaunched after its back-off: `ending` says why
    RAN_UNMANAGED = "ran_unmanaged"  # a command said no hello: runs without the SDK
    PAUSE_TIMED_OUT = "pause_timed_out"  # its round gave up on its pause: it keeps its share
    REATTACHED = "reattached"  # its agent outlived the daemon
    REATTACHED_UNMANAGED = "reattached_unmanaged"  # runs without the SDK, outlived the daemon


class MessageKind(StrEnum):
    """A message of a job's that came too late to matter (`StaleMessage`)."""

    HEARTBEAT = "heartbeat"
    PAUSED = "paused"
    RESUMED = "resumed"
    COMPLETED = "completed"  # its end, finished
    FAILED = "failed"  # its end, failed


class WaitReason(StrEnum):
    """What a job that has not started running waits for."""

    GPUS = "gpus"  # admission: free GPUs (or CPU training slots)
    ROUND_PAUSES = "round_pauses"  # the jobs a plan is moving to pause
    PLANNING = "planning"  # the round's plan, being made (scheduler/planning.py)
    ARRIVAL_WINDOW = "arrival_window"  # the arrival window to close
    HELLO = "hello"  # launched: its agent's hello
    SDK_HELLO = "sdk_hello"  # a launched command: the SDK's hello, or run without it


@dataclass(frozen=True)
class Waiting:
    """Why a job waits (`Scheduler.waiting`), with the figures and settings the words name."""

    reason: WaitReason
    seconds_left: float = 0.0  # ARRIVAL_WINDOW: until planned; HELLO, SDK_HELLO: at most
    setting_s: float = 0.0  # the setting that times it: the window, launch or SDK timeout
    gpus: int = 0  # GPUS: the GPUs (or slots) it asks for
    ahead: int = 0  # GPUS: jobs ahead of it in the queue
    holding: tuple[str, ...] = ()  # GPUS: ended jobs keeping theirs until their exit
