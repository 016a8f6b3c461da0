"""Settings of the scheduler core."""

from dataclasses import dataclass
from typing import ClassVar

from allocator import POLICIES, InvalidRequest

# allocator/lookahead.py: plans for the jobs' finishes on the smooth knee, weighing pauses.
DEFAULT_POLICY = "lookahead"
STALL_ACTIONS = ("warn", "fail")  # what follows a job's stall (SchedulerConfig.stall_action)


@dataclass(frozen=True)
class SchedulerConfig:
    """How the core plans and waits. Windows of 0 serve arrivals or completions at once.

    The one set of scheduler settings: the daemon reads it as its config file's
    `[scheduler]` table (configs/daemon.toml), a workload file as its `[scheduler]` table.
    """

    # pydantic (the daemon's config) reads this dataclass too: refuse misspelt keys there.
    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}

    policy: str = DEFAULT_POLICY
    arrival_window_s: float = 30.0  # paper Sec. III-C: both buffers at 30 s
    # A job that fits beside the running ones as they are (no one paused) starts at once;
    # the windows batch only the decisions that pause someone. False: every arrival waits
    # for its window, as the paper's buffers do (its workloads set it to reproduce them).
    start_when_free: bool = True
    completion_window_s: float = 30.0
    pause_timeout_s: float = 60.0  # then jobs still pausing keep their old allocation
    # A plan asked for and not made by then is given up and asked for again (the daemon
    # stops the process that was making it first): a policy that hangs must not leave the
    # jobs waiting for it forever (scheduler/planning.py).
    plan_timeout_s: float = 120.0
    # A running job whose link is silent this long is lost. The SDK's link speaks every
    # heartbeat period from a thread of its own, whatever the script does (a setup, an
    # evaluation, a save), so only a dead or hung process goes silent; a job may set its own.
    heartbeat_timeout_s: float = 60.0
    # A running job that makes no progress (no step, no new phase) this long is reported
    # stalled, and then `stall_action` applies: "warn" (reported, shown, left to run) or
    # "fail" (stopped and failed, relaunched from its checkpoint if its policy allows).
    stall_timeout_s: float = 3600.0
    stall_action: str = "warn"
    launch_timeout_s: float = 120.0  # then a launched job whose agent never said hello is lost
    # A command job whose process runs this long without the SDK's hello runs on unmanaged:
    # its workers stay as launched, it is never paused, and the plans go around it.
    unmanaged_after_s: float = 30.0
    # A failed job's relaunch waits restart_backoff_s, twice that after its second failure,
    # and so on up to restart_backoff_max_s (Kubernetes' crash-loop back-off: 10 s to 5 min).
    restart_backoff_s: float = 10.0
    restart_backoff_max_s: float = 300.0
    # A launch the node was short for (no file descriptors, memory or processes left) is
    # tried again after launch_retry_s, twice that after its next failure, and so on up to
    # launch_retry_max_s; `launch_timeout_s` still ends a launch that never succeeds.
    launch_retry_s: float = 0.5
    launch_retry_max_s: float = 10.0
    # An ended job's processes told to stop (cancelled, failed, lost) that still run this
    # long after are stopped; a completed job's may go on after its final step (an
    # evaluation, a save) for `finished_exit_s` (the daemon's config file names it at its top).
    cancel_grace_s: float = 5.0
    finished_exit_s: float = 600.0
    gate: bool = True  # reallocation gate on: change a running job only when it pays
    gate_hysteresis: float = 0.2  # the time saved must beat the pause cost by this much
    # A job's pause cost before its first pause, until pauses of its kind were measured on
    # this node (then their median): a restart from its checkpoint (paper Sec. IV-B), or, for
    # a job that resizes in place (the SDK's default), its loaders rebuilt in the process
    # (`stoker demo`'s hot resizes: 0.13 to 0.27 s), to which the core adds the job's own
    # first batch as its timed workers make one.
    default_pause_cost_s: float = 16.0
    hot_pause_cost_s: float = 0.5
    fair_floor: float = 0.8
    # Plan each job on its own curve, learned from its heartbeats (scheduler/curves.py),
    # rather than on the throughput model's prediction alone.
    learn_curves: bool = True
    # Plan on the node's contention eta(D) as the jobs' loader timings measured it together
    # (tpm/joint.py), the configured (or profiled) curve where they did not reach.
    learn_contention: bool = True
    # A running job whose learned curve moves its predicted rate by more than this fraction
    # from what the last plan assumed asks for a new round, as does a bend learned far off.
    replan_error: float = 0.2
    # ... that round starts this long after the ask, not after the completion window: long
    # enough for the jobs launched with it to measure their own curves too (3 heartbeats of
    # the simulated agents), so that one round, one pause each, serves them all.
    replan_window_s: float = 15.0
    # A refitted throughput model is used only if its held-out R^2, training and loading,
    # reach this (scheduler/refit.py); below, it is refused and reported.
    min_refit_r2: float = 0.5
    # How a job's curve bends (p of the smooth knee, scheduler/curves.py) until two of its
    # own operating points measure it. None: the policy's own (lookahead's 8, the paper
    # formula's near-hard knee). Published profiles of real loaders bend at 2.5 to 3.5
    # (docs/simulator.md, the node of today): an operator whose jobs are like those sets 3.
    knee_sharpness: float | None = None

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise InvalidRequest(
                "scheduler.policy", f"unknown policy {self.policy!r}; one of {', '.join(POLICIES)}"
            )
        self._check_signs()
        if self.restart_backoff_max_s < self.restart_backoff_s:
            raise InvalidRequest(
                "scheduler.restart_backoff_max_s", "must be at least scheduler.restart_backoff_s"
            )
        if self.launch_retry_max_s < self.launch_retry_s:
            raise InvalidRequest(
                "scheduler.launch_retry_max_s", "must be at least scheduler.launch_retry_s"
            )
        if self.stall_action not in STALL_ACTIONS:
            raise InvalidRequest(
                "scheduler.stall_action",
                f"one of {', '.join(STALL_ACTIONS)}, not {self.stall_action!r}",
            )
        if not 0.0 <= self.fair_floor <= 1.0:
            raise InvalidRequest("scheduler.fair_floor", "must lie in [0, 1]")
        if self.knee_sharpness is not None and not self.knee_sharpness > 0:
            raise InvalidRequest(
                "scheduler.knee_sharpness", "must be a positive number (or left out: the policy's)"
            )
        if not self.min_refit_r2 <= 1.0:
            raise InvalidRequest("scheduler.min_refit_r2", "must be at most 1 (a perfect fit)")

    def _check_signs(self) -> None:
        """Windows, costs and margins are not negative; timeouts are positive."""
        for name in (
            "arrival_window_s",
            "completion_window_s",
            "gate_hysteresis",
            "replan_error",
            "replan_window_s",
            "default_pause_cost_s",
            "hot_pause_cost_s",
            "restart_backoff_s",
            "restart_backoff_max_s",
        ):
            if getattr(self, name) < 0:
                raise InvalidRequest(f"scheduler.{name}", "must not be negative")
        for name in (
            "pause_timeout_s",
            "plan_timeout_s",
            "heartbeat_timeout_s",
            "stall_timeout_s",
            "launch_timeout_s",
            "unmanaged_after_s",
            "cancel_grace_s",
            "finished_exit_s",
            "launch_retry_s",
            "launch_retry_max_s",
        ):
            if getattr(self, name) <= 0:
                raise InvalidRequest(f"scheduler.{name}", "must be positive")
