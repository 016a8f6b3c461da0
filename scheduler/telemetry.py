"""Which heartbeats become training samples for the throughput model.

DESIGN.md: a training sample is measured with the input stall removed, so only an interval
in which the job spent at least `MIN_STEP_SHARE` of its time computing counts, and a job
gives at most one sample per `every_s`. The step time is the interval's busy time per
iteration, with the simulated agents' time scale undone.
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
class TelemetrySampler:
    every_s: float
    time_scale: float = 1.0  # agents that run this many times the real job's durations
    _last: dict[str, tuple[float, int]] = field(default_factory=dict)  # job -> (when, iteration)

    def step_time_s(self, beat: Beat, now: float) -> float | None:
        """The step time to record from this heartbeat, or None when it gives no sample."""
        last = self._last.get(beat.job_id)
        if last is None or beat.iteration <= last[1]:
            self._last[beat.job_id] = (now, beat.iteration)
            return None
        if now - last[0] < self.every_s:
            return None
        steps = beat.iteration - last[1]
        self._last[beat.job_id] = (now, beat.iteration)
        busy = beat.idle_s + beat.step_s
        if busy <= 0 or beat.step_s / busy < MIN_STEP_SHARE:
            return None
        return busy / steps / self.time_scale

    def forget(self, job_id: str) -> None:
        self._last.pop(job_id, None)
