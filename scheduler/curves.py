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

One operating point is enough when the SDK times its loader workers (a heartbeat's
`loader_cost_s`: a worker's wall seconds per sample, from taking up a batch's indices to
handing the batch over, so never its idle time). That is their cost at the node's
contention then, whether the job waited for them or not: c = loader_cost_s * eta, measured,
not inferred. In a heartbeat that waited, with the GPU's rate G = T / (1 - idle) and the
loaders' L = n * d / loader_cost_s, T = (G^-p + L^-p)^(-1/p) has one root p
(`_sharpness`): a heartbeat's bend, if it ran at `BEND_FROM` of its GPU's rate or more (far
below the knee every p fits). The median of the newest such bends is the job's p, ahead of
the two-point rule.

Waits no worker shortens are not the loaders' (protocol v6): the wait for each pass's first
batch (workers starting, the pipeline filling: the heartbeat's refill share), and, where
timed workers could make `SPARE` times what the step takes, all the job waited (handing
each batch over); where they could make less but more than the step takes, what it waited
beyond the most the softest bend allows there (`_unexplained`). Their seconds per sample
over the window are the job's `overhead_s`, added to every sample's time in its
predictions; the rest of each heartbeat is judged as above. On shared CPUs a job's step
also waits for a core: each step time is kept without its training thread's wait in the
run queue (as if the job had its cores to itself), and the wait of its newest `NOW`
heartbeats is added back to predict it now.
"""

import math
import statistics
from collections import deque
from dataclasses import dataclass, field, replace

from allocator import JobSpec
from allocator.bounds import MAX_SAMPLES_PER_S, MAX_SECONDS, MAX_WORKERS, MIN_SECONDS_PER_SAMPLE

PRIOR_WEIGHT = 0.08  # measurements' worth: (0.2 / 0.7)^2 (module docstring)
WINDOW = 30  # heartbeats
LOADING_BOUND = 0.05  # idle share from which a heartbeat measures the loaders
SHARPNESSES = (1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 12.0, 16.0, 24.0)  # candidate p
DISTINCT = 1.2  # two operating points this far apart (in effective workers) tell p from c
POINTS = 16  # operating points kept
NEAR_PEAK = 0.9  # points above this share of the GPU's rate do not measure the bend
SHARPEST = 24.0  # a bend past this is a hard knee: heartbeats cannot tell them apart
TIMED_BENDS = 3  # a timed job's bend is its own once this many heartbeats measured it
# A heartbeat below this share of its GPU's rate is on the straight part of any curve: its
# loaders' rate is its own whatever the bend, so the bend it implies is its timing's noise.
BEND_FROM = 0.5
CLOCKED = 3  # heartbeats whose CPU clocks say a job's CPU cost and core share
# Timed workers that could make this many times what a job's step takes leave it waiting
# for no sample: what it still waits (beyond each pass's first batch) is the hand-over of
# batches, a cost per batch whatever the workers. (It read as a soft bend, p = 1.5, in
# `stoker demo`.)
SPARE = 2.0
NOW = 3  # the newest heartbeats whose run-queue clocks say what its neighbours take now


@dataclass(frozen=True)
class Observation:
    """One heartbeat as the curve reads it."""

    samples_per_s: float
    idle_fraction: float
    workers_per_gpu: int
    efficiency: float  # eta(D) at the node's loader processes then
    loaders: bool = True  # False: the job decodes on the device, its loaders only augment
    # A loader worker's wall seconds per sample as the SDK timed them (0: not timed; an
    # older SDK or no workers). Contention included: the node's eta then is in it.
    loader_cost_s: float = 0.0
    # CPU clocks per sample (0: not measured): a loader worker's CPU seconds in that span and
    # its seconds waiting for a core, and the job's CPU seconds, training and loading.
    loader_cpu_s: float = 0.0
    loader_wait_s: float = 0.0
    cpu_cost_s: float = 0.0
    # The training thread's seconds per sample on a core and in the run queue (0: unknown).
    train_cpu_s: float = 0.0
    train_wait_s: float = 0.0
    # Of the idle share, the waits for a pass's first batch (0: none, or not measured).
    refill_fraction: float = 0.0


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
    bends: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))  # timed, logs
    # From the CPU clocks (logs, newest last): CPU seconds per sample, and the share of a
    # core its loader workers got while they could run (waits on I/O left out).
    cpu_costs: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    core_shares: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    # The training thread's seconds per sample in the run queue, newest heartbeats.
    train_waits: deque[float] = field(default_factory=lambda: deque(maxlen=NOW))
    # Each heartbeat's share of its time spent in waits no worker shortens, and its
    # samples/s: together the seconds per sample those waits cost.
    overheads: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=WINDOW))
    # A timed loader worker's wall seconds per sample, newest heartbeats: how long one
    # worker takes to make a batch now.
    loader_walls: deque[float] = field(default_factory=lambda: deque(maxlen=NOW))

    def refill_s(self, batch_per_gpu: float) -> float:
        """Seconds one of the job's workers takes to make a batch now, as its newest timed
        heartbeats say (0 until they are timed): what a resize in place waits for after its
        new workers start, since each worker makes whole batches."""
        if not self.loader_walls:
            return 0.0
        return batch_per_gpu * statistics.median(self.loader_walls)

    def observe(self, spec: JobSpec, seen: Observation) -> None:
        """Learn from one heartbeat of the job `spec` describes (its batch and GPUs)."""
        if not _physical(seen):
            return
        waited = self._clock(seen)
        # Waits no worker shortens are kept apart (`overheads`): the first batch of each
        # pass, and what of the wait its timed workers' speed does not explain (handing the
        # batches over: `_unexplained`). The rest of the heartbeat is the job's steady
        # state, which its loaders decide.
        apart = min(max(seen.refill_fraction, 0.0), seen.idle_fraction)
        timed = seen.loaders and seen.loader_cost_s > 0.0 and seen.workers_per_gpu >= 1
        loaders = spec.gpus * seen.workers_per_gpu / seen.loader_cost_s if timed else 0.0
        if timed:
            self.loader_walls.append(seen.loader_cost_s)
            spare = loaders * (1.0 - seen.idle_fraction) / seen.samples_per_s  # L / G
            apart = max(apart, _unexplained(seen.idle_fraction, spare))
        self.overheads.append((apart, seen.samples_per_s))
        rate = seen.samples_per_s / (1.0 - apart)
        idle = (seen.idle_fraction - apart) / (1.0 - apart)
        busy = (1.0 - idle) * spec.batch_size / rate  # an iteration's step
        # Kept as if the job had its cores to itself: its training thread's wait in the run
        # queue is the node's. (A step that sleeps or waits on its GPU waits there little.)
        self.step_times.append(math.log(max(busy - waited * spec.batch_size, 0.1 * busy)))
        self.step_seen += 1
        if not seen.loaders or seen.workers_per_gpu < 1:
            return
        effective = spec.gpus * seen.workers_per_gpu * seen.efficiency
        cost = effective / rate  # at most c: the job ran no faster than L
        if seen.loader_cost_s > 0.0:  # timed: c itself, waited or not
            self.sample_costs.append(math.log(seen.loader_cost_s * seen.efficiency))
            self.cost_seen += 1
        elif idle >= LOADING_BOUND:
            self.sample_costs.append(math.log(cost))
            self.cost_seen += 1
        if idle >= LOADING_BOUND:
            self._waited_at(effective, rate, idle, loaders, timed)
        elif seen.loader_cost_s <= 0.0:  # untimed and fed: its loaders kept up, c is no more
            self.cost_ceiling = cost if self.cost_ceiling is None else min(cost, self.cost_ceiling)

    def _waited_at(
        self, effective: float, rate: float, idle: float, loaders: float, timed: bool
    ) -> None:
        """A heartbeat that waited for its loaders (idle at least `LOADING_BOUND`): its rate
        at its operating point (`effective` loader processes), and, timed, its bend."""
        at = self.waited.setdefault(round(effective, 3), deque(maxlen=WINDOW))
        at.append(math.log(rate))
        if len(self.waited) > POINTS:
            del self.waited[next(iter(self.waited))]  # the oldest operating point
        if timed and 1.0 - idle >= BEND_FROM:
            bend = _sharpness(1.0 - idle, rate / loaders)
            if bend is not None:
                self.bends.append(math.log(bend))

    def _clock(self, seen: Observation) -> float:
        """Keep what the CPU clocks measured (they have no prior, so only measurements);
        return the seconds per sample the training thread waited for a core in this
        heartbeat, 0 where not measured."""
        if math.isfinite(seen.cpu_cost_s) and seen.cpu_cost_s > 0.0:
            self.cpu_costs.append(math.log(seen.cpu_cost_s))
        loading = _share(seen.loader_cpu_s, seen.loader_wait_s)
        if loading is not None:
            self.core_shares.append(math.log(loading))
        if _share(seen.train_cpu_s, seen.train_wait_s) is None:
            return 0.0
        self.train_waits.append(seen.train_wait_s)
        return seen.train_wait_s

    def learned(self, prior: JobSpec, *, alone: bool = False) -> JobSpec:
        """`prior` with the parameters its heartbeats measured weighed in: with its step
        as long as its training thread's wait for a core makes it now (the median of its
        newest `NOW` heartbeats'), or, with `alone`, as if it had its cores to itself."""
        if not self.step_times:
            return prior
        learned = self._learned(prior, alone)
        return _clamped(
            learned,
            step_time_s=learned.step_time_s,
            sample_cost_s=learned.sample_cost_s,
            cpu_cost_s=_clocked(self.cpu_costs, prior.cpu_cost_s),
            core_share=_clocked(self.core_shares, prior.core_share),
            overhead_s=_overhead(self.overheads),
        )

    def _learned(self, prior: JobSpec, alone: bool) -> JobSpec:
        cost = _weighed(prior.sample_cost_s, self.sample_costs, self.cost_seen)
        if not self.sample_costs and self.cost_ceiling is not None:
            cost = min(cost, self.cost_ceiling)
        step = _weighed(prior.step_time_s, self.step_times, self.step_seen)
        if not alone and self.train_waits:  # what its neighbours take now
            step += statistics.median(self.train_waits) * prior.batch_size
        if len(self.bends) >= TIMED_BENDS:
            sharpness = math.exp(statistics.median(self.bends))
            return replace(prior, step_time_s=step, sample_cost_s=cost, knee_sharpness=sharpness)
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


def _physical(seen: Observation) -> bool:
    """Whether a heartbeat's numbers are ones a job can make (allocator/bounds.py): finite,
    a rate of a sample a week to `MAX_SAMPLES_PER_S`, an idle share in [0, 1), a count of
    workers, seconds per sample of at most `MAX_SECONDS`. The protocol refuses others at the
    edge; the simulator and tests feed the core directly, so it checks again."""
    seconds = (
        seen.loader_cost_s,
        seen.loader_cpu_s,
        seen.loader_wait_s,
        seen.cpu_cost_s,
        seen.train_cpu_s,
        seen.train_wait_s,
    )
    return (
        1.0 / MAX_SECONDS <= seen.samples_per_s <= MAX_SAMPLES_PER_S
        and 0.0 <= seen.idle_fraction < 1.0
        and 0.0 <= seen.refill_fraction <= 1.0
        and 0.0 < seen.efficiency <= 1.0
        and 0 <= seen.workers_per_gpu <= MAX_WORKERS
        and all(0.0 <= value <= MAX_SECONDS for value in seconds)
    )


def _clamped(
    spec: JobSpec,
    *,
    step_time_s: float,
    sample_cost_s: float,
    cpu_cost_s: float | None,
    core_share: float | None,
    overhead_s: float,
) -> JobSpec:
    """`spec` with what its heartbeats measured, each held to what a job can physically do
    (allocator/bounds.py): no faster than `MAX_SAMPLES_PER_S` samples a second, its GPU's
    or one worker's, and no second figure past `MAX_SECONDS`. A learned curve then plans
    with finite numbers whatever its job reported (issue 37, finding 1)."""
    fastest_step = spec.batch_size * MIN_SECONDS_PER_SAMPLE
    return replace(
        spec,
        step_time_s=_within(step_time_s, fastest_step, MAX_SECONDS),
        sample_cost_s=_within(sample_cost_s, MIN_SECONDS_PER_SAMPLE, MAX_SECONDS),
        cpu_cost_s=None
        if cpu_cost_s is None
        else _within(cpu_cost_s, MIN_SECONDS_PER_SAMPLE, MAX_SECONDS),
        core_share=None if core_share is None else _within(core_share, 1e-6, 1.0),
        overhead_s=_within(overhead_s, 0.0, MAX_SECONDS),
    )


def _within(value: float, low: float, high: float) -> float:
    """`value` held to [low, high]; a NaN is `high` (the least a plan can be misled by)."""
    return high if math.isnan(value) else min(max(value, low), high)


def _sharpness(of_gpu: float, of_loaders: float) -> float | None:
    """The p for which a job running at these shares of its GPU's rate and of its loaders'
    is on the smooth knee: of_gpu^p + of_loaders^p = 1 (T = (G^-p + L^-p)^(-1/p) divided
    by T). The sum falls from 2 at p = 0 towards 0, so the root is unique. A job that kept
    pace with its loaders (a share of 1 or more, within its timing's noise) is as sharp as
    a heartbeat can tell, `SHARPEST`: counted, not dropped, so that the median of a starved
    job's bends is not pulled soft by its noise. A wait its workers do not explain (the
    main process's own share of loading, a copy of the batch outside their timed span)
    would read softer than any loader bends: the softest kept is `SHARPNESSES[0]`. None
    for shares that are not rates."""
    if not (0.0 < of_gpu < 1.0 and of_loaders > 0.0):
        return None
    if of_gpu**SHARPEST + min(of_loaders, 1.0) ** SHARPEST >= 1.0:
        return SHARPEST
    if of_gpu ** SHARPNESSES[0] + of_loaders ** SHARPNESSES[0] <= 1.0:
        return SHARPNESSES[0]
    low, high = 0.0, SHARPEST
    for _ in range(40):  # bisection to 2^-40 of the range
        middle = (low + high) / 2.0
        low, high = (middle, high) if of_gpu**middle + of_loaders**middle > 1.0 else (low, middle)
    return (low + high) / 2.0


def _unexplained(idle: float, spare: float) -> float:
    """The share of a heartbeat's time spent in a wait its loaders do not explain, for
    timed loaders that could make `spare` times what the step takes: all of it past `SPARE`;
    past 1, what is left of it beyond the most the softest bend kept (`SHARPNESSES[0]`)
    would wait there; none below (the loaders' own). The README's tabular example waits
    64 % of its time with loaders at 1.75 times its step's intake, where a bend of 1.5
    explains 21 %."""
    if spare > SPARE:
        return idle
    if spare <= 1.0:
        return 0.0
    softest = SHARPNESSES[0]
    explained = 1.0 - float((1.0 + spare**-softest) ** (-1.0 / softest))
    return max(0.0, (idle - explained) / (1.0 - explained))


def _share(cpu_s: float, wait_s: float) -> float | None:
    """The share of a core a thread got while it could run: CPU over CPU and run-queue wait;
    None where not measured."""
    if math.isfinite(cpu_s) and cpu_s > 0.0 and math.isfinite(wait_s) and wait_s >= 0.0:
        return cpu_s / (cpu_s + wait_s)
    return None


def _overhead(window: deque[tuple[float, float]]) -> float:
    """Seconds per sample waited whatever the workers, over the window: the waits' share of
    the heartbeats' time over the samples made in it (heartbeats are of about the same
    length), so that the few heartbeats in which a long pass began weigh what they cost
    among the many in which none did."""
    samples = sum(rate for _, rate in window)
    return sum(share for share, _ in window) / samples if samples > 0.0 else 0.0


def _clocked(window: deque[float], before: float | None) -> float | None:
    """The median of a CPU clock's window (logs), once `CLOCKED` heartbeats measured it;
    what was known `before` until then."""
    if len(window) < CLOCKED:
        return before
    return math.exp(statistics.median(window))


def _weighed(prior: float, window: deque[float], seen: int) -> float:
    """The geometric mean of the prior, PRIOR_WEIGHT times, and the window's median,
    `seen` times (the logs of the newest measurements, of `seen` so far)."""
    if not window:
        return prior
    middle = statistics.median(window)
    return math.exp((PRIOR_WEIGHT * math.log(prior) + seen * middle) / (PRIOR_WEIGHT + seen))
