"""Which heartbeats become training samples for the throughput model.

DESIGN.md: a training sample is measured with the input stall removed, so only an interval
in which the job spent at least `MIN_STEP_SHARE` of its time computing counts, and a job
gives at most one sample per `every_s`. The step time is the busy time of the heartbeats
since the last sample per iteration done meanwhile, with the simulated agents' time scale
undone.
"""

from dataclasses import dataclass, field

MIN_STEP_SHARE = 0.95


@dataclass(frozen=True)
class Beat:
    """What a heartbeat says of the time since the one before."""

    job_id: str
    iteration: int
    idle_s: float  # waiting for batches
    step_s: float  # forward, backward, update


@dataclass
class _Window:
    """The heartbeats of one job since its last sample (or since it began to be watched)."""

    since: float  # when it opened
    iteration: int  # the job's iteration then
    idle_s: float = 0.0  # summed over the heartbeats since
    step_s: float = 0.0


@dataclass
class TelemetrySampler:
    every_s: float
    time_scale: float = 1.0  # agents that run this many times the real job's durations
    _windows: dict[str, _Window] = field(default_factory=dict)

    def step_time_s(self, beat: Beat, now: float) -> float | None:
        """The step time to record from this heartbeat, or None when it gives no sample.
        A sample spans every heartbeat since the last one: their busy time over the
        iterations done meanwhile (each heartbeat tells only of the time since the one
        before it)."""
        window = self._windows.get(beat.job_id)
        if window is None or beat.iteration <= window.iteration:  # new, or relaunched
            self._windows[beat.job_id] = _Window(now, beat.iteration)
            return None
        window.idle_s += beat.idle_s
        window.step_s += beat.step_s
        if now - window.since < self.every_s:
            return None
        self._windows[beat.job_id] = _Window(now, beat.iteration)
        busy = window.idle_s + window.step_s
        if busy <= 0 or window.step_s / busy < MIN_STEP_SHARE:
            return None
        return busy / (beat.iteration - window.iteration) / self.time_scale

    def forget(self, job_id: str) -> None:
        self._windows.pop(job_id, None)
