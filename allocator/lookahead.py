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

A plan predicts a few candidates' hundreds of finishes, and after each the fill hands the
freed processes out one worker per GPU at a time: that fill is where a plan's time goes. So
it reads every job's rate from a table the plan fills in as it goes (allocator/ratetable.py,
allocator/tablefill.py) instead of rating each trial split, with the same choices; a fill
the plan has worked out before is looked up (a refinement's trials often meet the same
splits); a finish whose freed processes no job left fits or could pay its pause for is not
filled at all (allocator/regrowth.py); and a split is predicted once per plan (with no job
running, `keep` is `greedy`'s split and `balance`'s is its own unmoved run). The plans are
those of rating every split (bench/bench_allocator.py times them).

A job without `remaining_samples` cannot be looked ahead for: the request is then planned
by the marginal gains of the smooth curves alone (the `greedy` candidate).

On a node that trains on its CPUs (`NodeSpec.cpu_cores`), once every job's CPU clocks are
measured, the rates of every split are those of one budget of cores shared by training and
loading (allocator/cpunode.py): there a worker more for one job is CPU time less for the
others, and the paper's model, which gives the CPUs to the loaders alone, would promise
gains the node cannot give.
"""

from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from allocator.baselines import NO_SPARE_NOTE, balance
from allocator.errors import InvalidRequest
from allocator.jobarrays import DEFAULT_PAUSE_COST_S, KNEE_SHARPNESS, BoolArray, JobArrays
from allocator.knapsack import FloatArray, IntArray
from allocator.ratetable import RateTable
from allocator.regrowth import may_grow
from allocator.tablefill import fill_key, fill_on_table, remembered_fill
from allocator.throughput import make_plan
from allocator.types import AllocationPlan, AllocationRequest

# The knee and the pause a plan assumes are the jobs' (allocator/jobarrays.py), named here too.
__all__ = ["DEFAULT_PAUSE_COST_S", "KNEE_GAIN", "KNEE_SHARPNESS", "lookahead", "predict_finishes"]

# A worker is given to a job only while it buys at least this share of the job's rate: past
# the knee, workers that buy almost nothing stay free for the next arrival, which would
# otherwise have to pause the job to take them back.
KNEE_GAIN = 0.01
# Predicted scores closer than this (relative) are equal, and the earlier candidate wins: no
# prediction here is better than 1 % (issue 16's demo: heartbeats of one job vary by 20 %).
_TIE = 0.01
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
    jobs = JobArrays.of(request)
    candidates = _candidates(jobs)
    if any(job.remaining_samples is None for job in request.jobs):
        chosen = candidates["greedy"]
        notes = ["no lookahead (a job's remaining samples unknown): split by marginal gains"]
        notes += _budget_note(jobs)
        return make_plan(
            "lookahead", request, [int(d) for d in chosen], notes, knee_sharpness=KNEE_SHARPNESS
        )
    candidates["balance"] = shared
    predict = _Predictions(jobs)
    finishes = {name: predict(split) for name, split in candidates.items()}
    scores = {name: _score(jobs, ends) for name, ends in finishes.items()}
    start = min(scores, key=scores.__getitem__)
    refined, ends = _refine(jobs, candidates[start], finishes[start], predict)
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
    unmoved = predict(shared, moved=False)
    return replace(
        plan,
        predicted_makespan_s=float(finishes[name].max()),
        balance_makespan_s=float(unmoved.max()),
    )


def _budget_note(jobs: "JobArrays") -> list[str]:
    """The plan's word that its splits were weighed on the node's one budget of cores."""
    if jobs.cores is None:
        return []
    return [
        f"splits weighed on one budget of {jobs.cores.cores:g} CPUs that train and load "
        f"(the jobs keep {jobs.cores.busy_now:.2f} busy now)"
    ]


def _fill(
    jobs: JobArrays,
    split: IntArray,
    alive: BoolArray,
    growable: BoolArray,
    weight: FloatArray | None = None,
) -> IntArray:
    """Hand the processes the alive jobs leave free to the `growable` ones, one worker per GPU
    at a time, the most total samples/s per process first (each job's samples/s times its
    `weight`, where given), while the worker buys at least `KNEE_GAIN` of its job's rate and
    the total rises. Growing jobs must be alive. On the rate table where the jobs' rates
    are its (allocator/ratetable.py); else by rating every trial split."""
    if jobs.table is not None and not (growable & ~alive).any() and split.min() >= 1:
        return fill_on_table(jobs.table, split, alive, growable, weight=weight, knee_gain=KNEE_GAIN)
    weight = np.ones(len(split)) if weight is None else weight
    return _fill_by_rating(jobs, split, alive, growable, weight)


def _fill_by_rating(
    jobs: JobArrays, split: IntArray, alive: BoolArray, growable: BoolArray, weight: FloatArray
) -> IntArray:
    """`_fill` by rating every trial split in full: on a CPU node, whose rates are not the
    table's (allocator/ratetable.py), and the reference the table's fill is tested against."""
    split = split.copy()
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


def _candidates(jobs: JobArrays) -> dict[str, IntArray]:
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


def predict_finishes(jobs: JobArrays, split: IntArray, *, moved: bool = True) -> FloatArray:
    """Seconds from now until each job finishes under `split`, in a fluid model: running jobs
    whose workers change first pause (unless not `moved`: as if they ran with it already);
    `regrow_delay` after a finish (the scheduler's completion window) the processes freed go
    to the jobs left (`_fill`), a job growing only if that saves more than its pause over
    its remaining work."""
    count = len(split)
    left = jobs.remaining.astype(np.float64)  # a copy, updated in place
    split = split.copy()
    changed = (jobs.current > 0) & (split != jobs.current) & moved
    stalled = np.where(changed, jobs.pause_cost, 0.0)
    pausing = bool(changed.any())  # whether any job is stalled: else `stalled` is all 0
    alive = np.ones(count, dtype=bool)
    running = count
    # The fills' table, where they fill on it (`_fill`): growth only adds to `split`.
    table = jobs.table if jobs.table is not None and split.min() >= 1 else None
    processes = int(split @ jobs.gpus)  # the alive jobs' loader processes
    finishes = np.zeros(count)
    clock, regrow_at = 0.0, np.inf  # when the plan after the first unserved finish comes
    known: FloatArray | None = None  # the rates of `split` and `alive`, where known
    while running:
        rates = jobs.rates(split, alive, processes) if known is None else known
        known = None
        # Every rate positive and finite (a NaN fails the first test, an infinity the second),
        # unless read off a table all of whose rates are.
        if not (table is not None and table.all_positive and processes <= jobs.capacity):
            live = rates[alive]
            if not (live.min() > 0.0 and live.max() < np.inf):
                raise InvalidRequest("jobs", _NO_RATE)  # a NaN would never finish: no endless loop
        # While no job is stalled, `stalled` adds 0 and `step - stalled` is `step`: the same
        # doubles for fewer operations. (The samples of a finished job are never read.)
        if pausing:
            until = np.where(alive, stalled + left / rates, np.inf)
        else:
            until = np.where(alive, left / rates, np.inf)
        first = int(until.argmin())
        to_finish, to_plan = until.item(first), regrow_at - clock
        step = min(to_finish, to_plan)
        if pausing:
            left -= np.maximum(step - stalled, 0.0) * rates
            stalled = np.maximum(stalled - step, 0.0)
            pausing = bool(stalled.any())
        else:
            left -= step * rates
        clock += step
        if to_finish <= to_plan:
            finishes[first], alive[first], left[first] = clock, False, 0.0
            running -= 1
            processes -= split.item(first) * jobs.gpus.item(first)
            regrow_at = min(regrow_at, clock + jobs.regrow_delay)
            if clock < regrow_at or not running:
                continue  # the jobs left run as they are until the plan
        regrow_at = np.inf
        known = _regrow(jobs, split, alive, left, stalled, table=table, processes=processes)
        if known is None:  # some job grew, and pauses
            pausing, processes = True, int((split * alive) @ jobs.gpus)
    return finishes


def _regrow(
    jobs: JobArrays,
    split: IntArray,
    alive: BoolArray,
    left: FloatArray,
    stalled: FloatArray,
    *,
    table: RateTable | None,
    processes: int,
) -> FloatArray | None:
    """The plan after a finish: the `alive` jobs grow by `_fill` where the growth saves more
    than the job's pause over its `left` samples (then it pauses: `stalled`); in place. The
    rates of the split where no job grew (the fluid model's next step needs them), else None.
    A fill the plan has worked out before is looked up on the rate `table` (None where the
    fill rates every split); else `may_grow` may show it need not be worked out. The alive
    jobs run `processes` loader processes."""
    before = jobs.rates(split, alive, processes)
    key, grown = b"", None
    if table is not None:
        key = fill_key(split, alive, alive, KNEE_GAIN)
        grown = remembered_fill(table, key, split)
    if grown is None:
        if not may_grow(jobs, split, alive, left, before, processes=processes):
            return before
        if table is None:
            grown = _fill(jobs, split, alive, alive)
        else:
            grown = fill_on_table(
                table, split, alive, alive, weight=None, knee_gain=KNEE_GAIN, key=key
            )
    after = jobs.rates(grown, alive)
    unchanged = True
    for index in np.flatnonzero(grown != split):
        saved = left[index] / before[index] - left[index] / after[index]
        if saved > jobs.pause_cost[index]:
            split[index] = grown[index]
            stalled[index] += jobs.pause_cost[index]
            unchanged = False
    return before if unchanged else None


class _Predictions:
    """`predict_finishes` for one plan's jobs, worked out once per distinct question: with no
    job running, `keep` is `greedy`'s split and a move to `balance`'s split is no move."""

    def __init__(self, jobs: JobArrays) -> None:
        self.jobs = jobs
        self.known: dict[bytes, FloatArray] = {}

    def __call__(self, split: IntArray, moved: bool = True) -> FloatArray:
        """The finishes of `split` (read only: the same array answers the same question)."""
        pauses = (self.jobs.current > 0) & (split != self.jobs.current) & moved
        key = split.astype(np.int64).tobytes() + pauses.tobytes()
        if key not in self.known:
            self.known[key] = predict_finishes(self.jobs, split, moved=moved)
        return self.known[key]


def _refine(
    jobs: JobArrays, split: IntArray, finishes: FloatArray, predict: "_Predictions"
) -> tuple[IntArray, FloatArray]:
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
            ends = predict(trial)
            trial_score = _score(jobs, ends)
            if trial_score < score:
                split, finishes, score, improved = trial, ends, trial_score, True
                break
    return split, finishes


def _moves(jobs: JobArrays, split: IntArray, finishes: FloatArray, last: int) -> Iterator[IntArray]:
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


def _score(jobs: JobArrays, finishes: FloatArray) -> float:
    """GPU-weighted mean finish plus the last finish, in seconds: lower is better."""
    return float(jobs.gpus @ finishes / jobs.gpus.sum() + finishes.max())
