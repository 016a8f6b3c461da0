"""Each job's own curve, learned online from its heartbeats (issue 16, item 1).

The form is the paper's formula 7, T(d) = min(B / step_time, n * d * eta(D) / c): samples
per second against loader workers per GPU, monotone and concave. Its two parameters start
at what the throughput model predicts for the job (the prior: a fit over many jobs, or
for a script without hints a conservative default) and move to what the job measures:

- every heartbeat measures the step time: the busy part of an iteration,
  (1 - idle share) * B / T;
- a heartbeat of a job that waited for its loaders (idle share of 5 % or more) measures
  the loaders: c = n * d * eta / T at the node's contention then; one that did not wait
  bounds c from above (its loaders kept up).

Each parameter is a weighted geometric mean of the prior and the median of the job's
newest `WINDOW` measurements (a median: one odd heartbeat does not move it), the median
counting as every measurement so far and the prior as `PRIOR_WEIGHT` of one. That weight
is the ratio of their variances: the model's prediction for a job it never saw is off
by a factor of about 2 (a log error of 0.7; 39 % to 160 % on this node's real jobs, issue
16), one heartbeat by about 20 % (0.2), so one heartbeat weighs (0.7 / 0.2)^2, about 12
priors. A prior twice the truth is within 10 % after one measurement and 5 % after two;
ten times, within 10 % after 3. A job that changes (an evaluation phase, a new input size)
is followed within a window. The core leaves out each run's first heartbeat, which times
its loaders' start. Pure: data in, a spec out.

How the curve bends. Real loaders are not linear up to a hard knee: published profiles
(Synergy, OSDI 2022) rise 1.15 to 2.94 times from 3 to 12 cores per GPU and bend long
before they flatten, as the smooth knee T = (G^-p + L^-p)^(-1/p) does with p from 2.5 to
7. One operating point cannot tell c from p; two can. Once a job has waited for its
loaders at two worker counts at least `DISTINCT` apart, each below `NEAR_PEAK` of its GPU's
rate, its sharpness p is the one of `SHARPNESSES` under which those points imply the most
consistent c (the least spread of log c), and c their geometric mean under it; the job's
spec then carries its own p, which every prediction and `lookahead` use. Until then the
plan's default stands.
"""

import math
import statistics
from collections import deque
from dataclasses import dataclass, field, replace

from allocator import JobSpec

PRIOR_WEIGHT = 0.08  # measurements' worth: (0.2 / 0.7)^2 (module docstring)
WINDOW = 30  # heartbeats
LOADING_BOUND = 0.05  # idle share from which a heartbeat measures the loaders
SHARPNESSES = (1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 12.0, 16.0, 24.0)  # candidate p
DISTINCT = 1.2  # two operating points this far apart (in effective workers) tell p from c
POINTS = 16  # operating points kept
NEAR_PEAK = 0.9  # points above this share of the GPU's rate do not measure the bend


@dataclass(frozen=True)
class Observation:
    """One heartbeat as the curve reads it."""

    samples_per_s: float
    idle_fraction: float
    workers_per_gpu: int
    efficiency: float  # eta(D) at the node's loader processes then
    loaders: bool = True  # False: the job decodes on the device, its loaders only augment


@dataclass
class JobCurve:
    """What a job's heartbeats said of its two parameters (logs, newest last)."""

    step_times: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    sample_costs: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    cost_ceiling: float | None = None  # the least c that kept up, while none waited
    step_seen: int = 0  # measurements ever, each parameter's
    cost_seen: int = 0
    # Where it waited for its loaders: effective workers (n * d * eta) -> its samples/s there
    # (logs, newest last), for its sharpness.
    waited: dict[float, deque[float]] = field(default_factory=dict)

    def observe(self, spec: JobSpec, seen: Observation) -> None:
        """Learn from one heartbeat of the job `spec` describes (its batch and GPUs)."""
        if not seen.samples_per_s > 0 or not 0.0 <= seen.idle_fraction < 1.0:
            return
        iteration_s = spec.batch_size / seen.samples_per_s
        self.step_times.append(math.log((1.0 - seen.idle_fraction) * iteration_s))
        self.step_seen += 1
        if not seen.loaders or seen.workers_per_gpu < 1:
            return
        effective = spec.gpus * seen.workers_per_gpu * seen.efficiency
        cost = effective / seen.samples_per_s
        if seen.idle_fraction >= LOADING_BOUND:
            self.sample_costs.append(math.log(cost))
            self.cost_seen += 1
            at = self.waited.setdefault(round(effective, 3), deque(maxlen=WINDOW))
            at.append(math.log(seen.samples_per_s))
            if len(self.waited) > POINTS:
                del self.waited[next(iter(self.waited))]  # the oldest operating point
        else:
            self.cost_ceiling = cost if self.cost_ceiling is None else min(cost, self.cost_ceiling)

    def learned(self, prior: JobSpec) -> JobSpec:
        """`prior` with the parameters its heartbeats measured weighed in."""
        if not self.step_times:
            return prior
        cost = _weighed(prior.sample_cost_s, self.sample_costs, self.cost_seen)
        if not self.sample_costs and self.cost_ceiling is not None:
            cost = min(cost, self.cost_ceiling)
        step = _weighed(prior.step_time_s, self.step_times, self.step_seen)
        bend = self._bend(prior.batch_size / step)
        if bend is None:
            return replace(prior, step_time_s=step, sample_cost_s=cost)
        cost, sharpness = bend
        return replace(prior, step_time_s=step, sample_cost_s=cost, knee_sharpness=sharpness)

    def _bend(self, peak: float) -> tuple[float, float] | None:
        """(c, p) from the points where it waited, if two are `DISTINCT` apart (module
        docstring); None before."""
        points = [
            (effective, math.exp(statistics.median(rates)))
            for effective, rates in self.waited.items()
        ]
        # Near the peak a heartbeat's noise says more than the bend does.
        points = [(effective, rate) for effective, rate in points if rate < NEAR_PEAK * peak]
        if len(points) < 2:
            return None
        workers = [effective for effective, _ in points]
        if max(workers) < DISTINCT * min(workers):
            return None
        best: tuple[float, float, float] | None = None  # (spread, c, p)
        for power in SHARPNESSES:
            logs = [
                math.log(effective) + math.log(rate**-power - peak**-power) / power
                for effective, rate in points
            ]
            spread = statistics.pvariance(logs)
            if best is None or spread < best[0]:
                best = (spread, math.exp(statistics.mean(logs)), power)
        assert best is not None
        return best[1], best[2]


def _weighed(prior: float, window: deque[float], seen: int) -> float:
    """The geometric mean of the prior, PRIOR_WEIGHT times, and the window's median,
    `seen` times (the logs of the newest measurements, of `seen` so far)."""
    if not window:
        return prior
    middle = statistics.median(window)
    return math.exp((PRIOR_WEIGHT * math.log(prior) + seen * middle) / (PRIOR_WEIGHT + seen))
