"""`lookahead`, the default policy: it plans for when the jobs finish, not for the instant's rate.

`optimal` maximises the predicted total samples/s of the moment, and on a node where jobs
come and go that loses to `balance` (issue 16: paper-dynamic 1,496 s against 1,478 s; the
geometric-mean makespan of 100 generated workloads 0.9 % longer). Three causes, each seen in
the simulator's timelines:

- It gives a job just the workers that match its GPU. There prefetch queues do not hide the
  jitter of either side and the job runs below both rates: the knee is smooth, not the hard
  min of formula 5, and a job at it runs about 8 % slow.
- It trades one job's finish for another's rate when the sum of rates favours it: a short
  job starved to feed a long one finishes hundreds of seconds later, though the workers it
  would free would soon go to the long one anyway.
- It moves running jobs whose pause costs more than the move buys over their remaining work.

`lookahead` plans on each job's smooth curve, T = (G^-p + L^-p)^(-1/p) with G = B*mu the rate
its GPUs allow and L = n*d*eta/c what its loaders deliver (p is the job's own
`knee_sharpness` where it has one, else `KNEE_SHARPNESS`; formula 5's hard min as p
grows). T is concave in d, so a worker's marginal gain falls smoothly past the knee and the
plan keeps headroom there. It builds a few candidate splits (`_candidates`) and predicts,
for each, when every job finishes (`predict_finishes`): a fluid model of the samples each
job has left, in which a running job whose workers change first pauses for its measured
pause cost, and the processes a finished job frees go to the jobs still running when the
scheduler's next plan comes (`regrow_delay_s` later), each growth made only if it pays its
pause over the job's remaining work (the gate's rule). It keeps the candidate with the
least score: the GPU-weighted mean finish (when GPUs come free for the jobs queued behind
them, the average JCT) plus the last finish (the makespan of the jobs now running). A move
to `balance`'s split is one of the candidates, so no plan scores worse than that move.
The best candidate is then refined (`_refine`): the job it has finishing last is given a
worker per GPU, free or from a job that finishes sooner, while that lowers the score. Each
candidate fills by rates, and twins whose split differs by a worker end apart; on a curve
that bends early the one a worker short may end 5 % later (issue 16, item 6: two AlexNets
at 20 and 21 workers ended 36 s apart, the node's last 31 s on one of them).

A job without `remaining_samples` cannot be looked ahead for: the request is then planned
by the marginal gains of the smooth curves alone (the `greedy` candidate).

On a node that trains on its CPUs (`NodeSpec.cpu_cores`), once every job's CPU clocks are
measured, the rates of every split are those of one budget of cores shared by training and
loading (allocator/cpunode.py): there a worker more for one job is CPU time less for the
others, and the paper's model, which gives the CPUs to the loaders alone, would promise
gains the node cannot give.
"""

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from allocator.baselines import NO_SPARE_NOTE, balance
from allocator.contention import ContentionCurve
from allocator.cpunode import CoreBudget
from allocator.errors import InvalidRequest
from allocator.knapsack import FloatArray, IntArray
from allocator.throughput import make_plan, with_overhead
from allocator.types import AllocationPlan, AllocationRequest

BoolArray = npt.NDArray[np.bool_]

# The sharpness p of the knee. A job whose loaders deliver exactly its GPU's rate runs at
# 2^(-1/p) of it: 0.917 at 8. This is the simulator's calibrated truth (workloads/truth.py),
# not yet learned from a job's own telemetry.
KNEE_SHARPNESS = 8.0
# A worker is given to a job only while it buys at least this share of the job's rate: past
# the knee, workers that buy almost nothing stay free for the next arrival, which would
# otherwise have to pause the job to take them back.
KNEE_GAIN = 0.01
# Predicted scores closer than this (relative) are equal, and the earlier candidate wins: no
# prediction here is better than 1 % (issue 16's demo: heartbeats of one job vary by 20 %).
_TIE = 0.01
# Before a job has been paused once: the scheduler's default (paper Sec. IV-B).
DEFAULT_PAUSE_COST_S = 16.0
# Fluid-model predictions the refinement may spend: a plan's time grows with them
# (bench/bench_allocator.py times `lookahead`, docs/results.md).
_REFINE_BUDGET = 32
_NO_RATE = "a job's predicted rate is not a positive finite number: its spec is out of range"


def lookahead(request: AllocationRequest) -> AllocationPlan:
    """The candidate split whose predicted finishes score best; `balance`'s is a candidate.
    The plan names `balance`'s split (`balance_workers`), so that a run can tell where it
    departed from the one `balance` would have run (workloads/live.py)."""
    if not request.jobs:
        return make_plan("lookahead", request, [], knee_sharpness=KNEE_SHARPNESS)
    shared = balance(request).workers()
    plan = _lookahead(request, np.array([shared[job.id] for job in request.jobs], dtype=np.int64))
    return replace(plan, balance_workers=shared)


def _lookahead(request: AllocationRequest, shared: IntArray) -> AllocationPlan:
    if request.node.cpu_workers <= request.floor_processes:
        ones = [1] * len(request.jobs)
        return make_plan("lookahead", request, ones, [NO_SPARE_NOTE], knee_sharpness=KNEE_SHARPNESS)
    jobs = _Jobs.of(request)
    candidates = _candidates(jobs)
    if any(job.remaining_samples is None for job in request.jobs):
        chosen = candidates["greedy"]
        notes = ["no lookahead (a job's remaining samples unknown): split by marginal gains"]
        notes += _budget_note(jobs)
        return make_plan(
            "lookahead", request, [int(d) for d in chosen], notes, knee_sharpness=KNEE_SHARPNESS
        )
    candidates["balance"] = shared
    finishes = {name: predict_finishes(jobs, split) for name, split in candidates.items()}
    scores = {name: _score(jobs, ends) for name, ends in finishes.items()}
    start = min(scores, key=scores.__getitem__)
    refined, ends = _refine(jobs, candidates[start], finishes[start])
    candidates["refined"], finishes["refined"] = refined, ends
    scores["refined"] = _score(jobs, ends)
    # The first candidate within the tie margin of the best: keeping running jobs as they
    # are, or processes free for the next arrival, beats a gain too small to predict.
    best = min(scores.values())
    name = next(key for key, score in scores.items() if score <= best * (1.0 + _TIE))
    chosen, notes = candidates[name], [f"lookahead chose the {name} split"]
    notes += _budget_note(jobs)
    plan = make_plan(
        "lookahead", request, [int(d) for d in chosen], notes, knee_sharpness=KNEE_SHARPNESS
    )
    # Balance's makespan as if its split were the one running: what a run under `balance`
    # would take from here, not what a move to it now would (its pauses are in the
    # candidate's score, not in the figure reported).
    unmoved = predict_finishes(jobs, shared, moved=False)
    return replace(
        plan,
        predicted_makespan_s=float(finishes[name].max()),
        balance_makespan_s=float(unmoved.max()),
    )


def _budget_note(jobs: "_Jobs") -> list[str]:
    """The plan's word that its splits were weighed on the node's one budget of cores."""
    if jobs.cores is None:
        return []
    return [
        f"splits weighed on one budget of {jobs.cores.cores:g} CPUs that train and load "
        f"(the jobs keep {jobs.cores.busy_now:.2f} busy now)"
    ]


@dataclass(frozen=True)
class _Jobs:
    """Per-job constants as arrays, in request order, and the node they share."""

    gpus: IntArray
    cost: FloatArray  # c_i, seconds per sample per worker
    peak: FloatArray  # B_i * mu_i: what the GPUs allow
    remaining: FloatArray  # samples left (1 where unknown: only `greedy` is used then)
    current: IntArray  # workers per GPU now; 0 for a job not running
    pause_cost: FloatArray  # seconds a change of workers stops the job
    sharpness: FloatArray  # p of each job's knee: its own where known, else KNEE_SHARPNESS
    overhead: FloatArray  # each job's waits no worker shortens, seconds per sample
    capacity: int
    contention: ContentionCurve
    regrow_delay: float  # seconds from a finish to the plan that hands its processes on
    # On a node that trains on its CPUs, the cores every split shares (allocator/cpunode.py).
    cores: CoreBudget | None = None

    @classmethod
    def of(cls, request: AllocationRequest) -> "_Jobs":
        jobs = request.jobs
        planned = cls(
            gpus=np.array([job.gpus for job in jobs], dtype=np.int64),
            cost=np.array([job.sample_cost_s for job in jobs]),
            peak=np.array([job.max_samples_per_s for job in jobs]),
            remaining=np.array([max(1.0, job.remaining_samples or 0.0) for job in jobs]),
            current=np.array([job.current_workers_per_gpu or 0 for job in jobs], dtype=np.int64),
            pause_cost=np.array(
                [
                    DEFAULT_PAUSE_COST_S if job.pause_cost_s is None else job.pause_cost_s
                    for job in jobs
                ]
            ),
            sharpness=np.array([job.knee_sharpness or KNEE_SHARPNESS for job in jobs]),
            overhead=np.array([job.overhead_s for job in jobs]),
            capacity=request.node.cpu_workers,
            contention=request.node.contention,
            regrow_delay=request.regrow_delay_s,
        )
        running = planned.current > 0
        now = planned.rates(np.where(running, planned.current, 1), running)
        cores = CoreBudget.of(request, now, running)
        return planned if cores is None else replace(planned, cores=cores)

    def rates(self, splits: IntArray, alive: BoolArray) -> FloatArray:
        """Samples/s of every job under each split (rows), counting the loader processes of
        the `alive` jobs only."""
        splits_2d = np.atleast_2d(splits)
        processes = (splits_2d * alive) @ self.gpus
        efficiency = self.contention.efficiencies(np.maximum(processes, 1))[:, None]
        loading = np.maximum(self.gpus * splits_2d * efficiency / self.cost, 1e-12)
        power = -self.sharpness
        steady: FloatArray = (loading**power + self.peak**power) ** (1.0 / power)
        rates = with_overhead(steady, self.overhead)
        if self.cores is not None:
            rates = self.cores.spend(rates, alive)
        return rates if splits.ndim == 2 else rates[0]


def _fill(
    jobs: _Jobs,
    split: IntArray,
    alive: BoolArray,
    growable: BoolArray,
    weight: FloatArray | None = None,
) -> IntArray:
    """Hand the processes the alive jobs leave free to the `growable` ones, one worker per GPU
    at a time, the most total samples/s per process first (each job's samples/s times its
    `weight`, where given), while the worker buys at least `KNEE_GAIN` of its job's rate and
    the total rises."""
    split = split.copy()
    weight = np.ones(len(split)) if weight is None else weight
    indices = np.flatnonzero(growable)
    if not len(indices):
        return split
    steps = np.zeros((len(indices), len(split)), dtype=np.int64)
    steps[np.arange(len(indices)), indices] = 1
    while True:
        free = jobs.capacity - int(jobs.gpus[alive] @ split[alive])
        fits = jobs.gpus[indices] <= free
        if not fits.any():
            return split
        now = jobs.rates(split, alive)
        trials = jobs.rates(split + steps, alive)
        own = trials[np.arange(len(indices)), indices] - now[indices]
        gains = (trials[:, alive] - now[alive]) @ weight[alive]
        total = gains / jobs.gpus[indices]
        worth = fits & (own >= KNEE_GAIN * now[indices]) & (total > 0.0)
        if not worth.any():
            return split
        split[indices[int(np.argmax(np.where(worth, total, -np.inf)))]] += 1


def _candidates(jobs: _Jobs) -> dict[str, IntArray]:
    """The splits worth predicting, by name, in order of preference among equals."""
    count = len(jobs.gpus)
    everyone = np.ones(count, dtype=bool)
    ones = np.ones(count, dtype=np.int64)
    out: dict[str, IntArray] = {}
    running = jobs.current > 0
    kept = np.where(running, jobs.current, 1)
    if jobs.gpus @ kept <= jobs.capacity:
        # Running jobs keep their workers (no pause); new jobs share what is free.
        out["keep"] = _fill(jobs, kept, everyone, ~running)
    out["greedy"] = _fill(jobs, ones, everyone, everyone)
    # Samples of different models are not worth the same: a speech job's 27 samples/s may be
    # its GPU's whole rate. This split grows the jobs by the share of their GPUs' rate a
    # process buys them (their speedup), which no job's sample size tips.
    out["by speedup"] = _fill(jobs, ones, everyone, everyone, 1.0 / jobs.peak)
    # Shortest (longest) first: each job in turn up to its knee, leaving one worker per GPU
    # to the jobs after it; what is left goes by marginal gain.
    at_peak = jobs.remaining / jobs.peak
    shortest = np.argsort(at_peak, kind="stable")
    for name, order in (("shortest first", shortest), ("longest first", shortest[::-1])):
        split = ones.copy()
        for index in order:
            alone = np.zeros(count, dtype=bool)
            alone[index] = True
            grown = _fill(jobs, split, everyone, alone)
            split[index] = grown[index]
        out[name] = _fill(jobs, split, everyone, everyone)
    return out


def predict_finishes(jobs: _Jobs, split: IntArray, *, moved: bool = True) -> FloatArray:
    """Seconds from now until each job finishes under `split`, in a fluid model: running jobs
    whose workers change first pause (unless not `moved`: as if they ran with it already);
    `regrow_delay` after a finish (the scheduler's completion window) the processes freed go
    to the jobs left (`_fill`), a job growing only if that saves more than its pause over
    its remaining work."""
    count = len(split)
    left = jobs.remaining.copy()
    split = split.copy()
    changed = (jobs.current > 0) & (split != jobs.current) & moved
    stalled = np.where(changed, jobs.pause_cost, 0.0)
    alive = np.ones(count, dtype=bool)
    finishes = np.zeros(count)
    clock, regrow_at = 0.0, np.inf  # when the plan after the first unserved finish comes
    while alive.any():
        rates = jobs.rates(split, alive)
        if not (np.isfinite(rates[alive]).all() and (rates[alive] > 0.0).all()):
            raise InvalidRequest("jobs", _NO_RATE)  # a NaN would never finish: no endless loop
        until = np.where(alive, stalled + left / rates, np.inf)
        first = int(np.argmin(until))
        to_finish, to_plan = float(until[first]), regrow_at - clock
        step = min(to_finish, to_plan)
        left = np.where(alive, left - np.clip(step - stalled, 0.0, None) * rates, left)
        stalled = np.clip(stalled - step, 0.0, None)
        clock += step
        if to_finish <= to_plan:
            finishes[first], alive[first], left[first] = clock, False, 0.0
            regrow_at = min(regrow_at, clock + jobs.regrow_delay)
            if clock < regrow_at or not alive.any():
                continue  # the jobs left run as they are until the plan
        regrow_at = np.inf
        before = jobs.rates(split, alive)
        grown = _fill(jobs, split, alive, alive)
        after = jobs.rates(grown, alive)
        for index in np.flatnonzero(grown != split):
            saved = left[index] / before[index] - left[index] / after[index]
            if saved > jobs.pause_cost[index]:
                split[index] = grown[index]
                stalled[index] += jobs.pause_cost[index]
    return finishes


def _refine(jobs: _Jobs, split: IntArray, finishes: FloatArray) -> tuple[IntArray, FloatArray]:
    """Local search from `split`: give the job that finishes last a worker per GPU, from the
    free processes or else from the jobs that finish first and can spare one (`_moves`),
    taking the first move that lowers the predicted score, again from the new split; until
    none does, the worker would buy the last job less than `KNEE_GAIN` of its rate, or
    `_REFINE_BUDGET` predictions are spent."""
    split, score = split.copy(), _score(jobs, finishes)
    everyone = np.ones(len(split), dtype=bool)
    budget = _REFINE_BUDGET
    improved = True
    while improved and budget > 0:
        improved = False
        last = int(np.argmax(finishes))
        grown = split.copy()
        grown[last] += 1
        before, after = jobs.rates(np.stack([split, grown]), everyone)[:, last]
        if after - before < KNEE_GAIN * before:
            break  # past its knee: a worker more buys it nothing worth a move
        for trial in _moves(jobs, split, finishes, last):
            if budget == 0:
                break
            budget -= 1
            ends = predict_finishes(jobs, trial)
            trial_score = _score(jobs, ends)
            if trial_score < score:
                split, finishes, score, improved = trial, ends, trial_score, True
                break
    return split, finishes


def _moves(jobs: _Jobs, split: IntArray, finishes: FloatArray, last: int) -> Iterator[IntArray]:
    """Splits that give `last` one worker per GPU: from the free processes if they suffice,
    then from donors in the order they finish (a worker per GPU from each, from the k-th
    and those after it until the processes freed cover `last`'s GPUs: a 4-GPU job needs
    four 1-GPU donors)."""
    grown = split.copy()
    grown[last] += 1
    free = jobs.capacity - int(jobs.gpus @ split)
    if free >= jobs.gpus[last]:
        yield grown
        return
    order = np.argsort(finishes, kind="stable")
    donors = [int(i) for i in order if i != last and split[i] > 1]
    for first in range(len(donors)):
        trial, freed = grown.copy(), free
        for donor in donors[first:]:
            trial[donor] -= 1
            freed += int(jobs.gpus[donor])
            if freed >= jobs.gpus[last]:
                yield trial
                break
        else:
            return  # the donors after `first` cannot cover it; fewer never will


def _score(jobs: _Jobs, finishes: FloatArray) -> float:
    """GPU-weighted mean finish plus the last finish, in seconds: lower is better."""
    return float(jobs.gpus @ finishes / jobs.gpus.sum() + finishes.max())
