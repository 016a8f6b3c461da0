"""The rates `lookahead` fills by, looked up instead of computed one worker at a time.

`lookahead`'s fill hands a node's free loader processes out one worker per GPU at a time,
each to the job whose worker buys the most samples/s on the node. On a GPU node a job's rate
depends on two numbers only: its own workers per GPU d, and the node's total of loader
processes D, through the contention efficiency eta(D). Both are small integers (D is at most
the node's capacity), so every rate a fill can ask for is an entry of one table per job,
rate[d][D]; a row of it (one d, every D) is computed once per plan, when a fill first needs
it, with the very expression `lookahead` rates splits by, so each entry is the same number.

A worker for job j moves D to D + g_j (its GPUs). What the node gains is j's own gain at the
new efficiency plus what every running job's rate changes by as eta(D) falls to
eta(D + g_j); the second part is the same for every job on g_j GPUs, and it is a difference
of one sum over the node, F(D) = sum of each job's weighted rate at its own d and at total D,
kept as one row over D and updated as each worker is handed out. A step of the fill then
costs a few lookups per job rather than rating an n x n matrix of trial splits, for the same
choices: only the order of the additions differs, so two jobs whose gains agree to the last
bits of a double could swap (tests/unit/allocator/test_ratetable.py holds the fill to the
plain greedy's picks on random nodes, contention and all).

A CPU node's rates (allocator/cpunode.py) share one budget of cores among all the jobs, so
they are not a function of (d, D): `lookahead` rates those splits as they come.
"""

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from allocator.contention import ContentionCurve
from allocator.throughput import with_overhead

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# Workers per GPU rated at once for a job (`RateTable.rows`): a fill asks for the next few.
_BLOCK = 8
# Jobs past their knee `_Fill` checks one at a time, before it checks every job at once.
_TRIED_ONE_AT_A_TIME = 3


@dataclass
class RateTable:
    """Each job's samples/s at d workers per GPU when the node runs D loader processes, for
    D from 0 to the node's capacity; rows (one job, one d) computed on first use."""

    gpus: IntArray
    cost: FloatArray
    peak: FloatArray
    sharpness: FloatArray
    overhead: FloatArray
    capacity: int
    contention: ContentionCurve
    # pool[row_of[j, d]] is job j's rate at d over every D, row_of -1 until it is computed
    # (with the rest of its block of `_BLOCK` workers per GPU).
    row_of: IntArray = field(init=False)
    pool: FloatArray = field(init=False)
    # gains[row] = pool[row of one worker more] - pool[row]: what that worker buys at each D.
    gains: FloatArray = field(init=False)
    used: int = field(init=False, default=0)  # rows of the pool computed
    efficiency: FloatArray = field(init=False)
    levels: FloatArray = field(init=False)  # the distinct values of eta over the totals
    level_of: IntArray = field(init=False)  # each total's index in `levels`
    # The rows of the splits rated so far: a fluid model rates one split at many totals.
    split_rows: dict[bytes, IntArray] = field(init=False, default_factory=dict)

    everyone: IntArray = field(init=False)  # every job's index

    def __post_init__(self) -> None:
        # `JobArrays.rates` takes eta at no fewer than one process: so does every column here.
        totals = np.maximum(np.arange(self.capacity + 1), 1)
        self.efficiency = self.contention.efficiencies(totals)
        # A row is a function of eta alone, and eta is one number across the contention-free
        # stage: rates are worked out once per level of eta, then spread over the totals.
        self.levels, self.level_of = np.unique(self.efficiency, return_inverse=True)
        self.row_of = np.full((len(self.gpus), 4 * _BLOCK), -1, dtype=np.int64)
        # Room for a few blocks a job (`np.empty` takes memory only where rows are written).
        self.pool = np.empty((4 * _BLOCK * len(self.gpus), self.capacity + 1))
        self.gains = np.empty_like(self.pool)
        self.everyone = np.arange(len(self.gpus))

    def rows(self, jobs: IntArray, workers: IntArray) -> IntArray:
        """The pool rows of each (job, workers per GPU) pair, computing those not yet there."""
        most = int(workers.max())
        if (most // _BLOCK + 1) * _BLOCK > self.row_of.shape[1]:  # room for its whole block
            wider = np.full((len(self.gpus), 2 * most + _BLOCK), -1, dtype=np.int64)
            wider[:, : self.row_of.shape[1]] = self.row_of
            self.row_of = wider
        found: IntArray = self.row_of[jobs, workers]
        if found.min() < 0:
            missing = found < 0
            self._compute(jobs[missing], workers[missing] // _BLOCK)
            found = self.row_of[jobs, workers]
        return found

    def row(self, job: int, workers: int) -> int:
        """`rows` of one pair, without numpy's cost per call where the row is there."""
        if workers < self.row_of.shape[1]:
            found = int(self.row_of[job, workers])
            if found >= 0:
                return found
        return int(self.rows(np.array([job]), np.array([workers]))[0])

    def _compute(self, jobs: IntArray, blocks: IntArray) -> None:
        """Rate the jobs' blocks of workers at every D as `JobArrays.rates` would, into the pool."""
        width = self.row_of.shape[1]
        pairs = np.unique(jobs * width + blocks)
        jobs, blocks = np.divmod(pairs, width)
        first, last = self.used, self.used + len(pairs) * _BLOCK
        while last > len(self.pool):
            self.pool = np.concatenate([self.pool, np.empty_like(self.pool)])
            self.gains = np.concatenate([self.gains, np.empty_like(self.gains)])
        # Each block's rows and the one after it, whose difference is the block's gains.
        jobs = np.repeat(jobs, _BLOCK + 1)
        workers = (blocks[:, None] * _BLOCK + np.arange(_BLOCK + 1)).ravel()
        # No split gives a job no worker (`rates` and the fill see to it): the row of 0 holds
        # 1's rates, never read, rather than a rate of no loader at all.
        workers = np.maximum(workers, 1)
        # The same operations in the same order as `JobArrays.rates`: the same doubles.
        processes = (self.gpus[jobs] * workers)[:, None]
        loading = np.maximum(processes * self.levels / self.cost[jobs, None], 1e-12)
        power = -self.sharpness[jobs, None]
        steady = (loading**power + self.peak[jobs, None] ** power) ** (1.0 / power)
        rates = with_overhead(steady, self.overhead[jobs, None])
        rates = rates.reshape(len(pairs), _BLOCK + 1, -1)
        levels = len(self.levels)
        own = rates[:, :-1].reshape(last - first, levels)
        gains = (rates[:, 1:] - rates[:, :-1]).reshape(last - first, levels)
        np.take(own, self.level_of, axis=1, out=self.pool[first:last])
        np.take(gains, self.level_of, axis=1, out=self.gains[first:last])
        block_jobs = jobs[:: _BLOCK + 1, None]
        block_workers = blocks[:, None] * _BLOCK + np.arange(_BLOCK)
        self.row_of[block_jobs, block_workers] = np.arange(first, last).reshape(-1, _BLOCK)
        self.used = last

    def rates(self, splits: IntArray, processes: IntArray) -> FloatArray | None:
        """Every job's rate under each split (rows) at the node's total of processes for it;
        None where a total is past the node's capacity (the table stops there) or a job has
        no worker."""
        if int(processes.max()) > self.capacity or int(splits.min()) < 1:
            return None
        # The rows before the pool is read: computing them may grow it.
        rows = np.stack([self.split_rows_of(split) for split in splits])
        looked_up: FloatArray = self.pool[rows, processes[:, None]]
        return looked_up

    def rates_of(self, split: IntArray, processes: int) -> FloatArray | None:
        """`rates` of one split at one total, as the fluid model asks at every step."""
        rows = self.split_rows.get(split.tobytes())
        if rows is None:
            if int(split.min()) < 1:
                return None
            rows = self.split_rows_of(split)  # before the pool is read: it may grow
        if processes > self.capacity:
            return None
        one: FloatArray = self.pool[rows, processes]
        return one

    def split_rows_of(self, split: IntArray) -> IntArray:
        """The pool rows of every job at its workers per GPU in `split` (each at least 1),
        remembered: a fluid model rates one split at many totals, and fills from it."""
        key = split.tobytes()
        rows = self.split_rows.get(key)
        if rows is None:
            rows = self.split_rows[key] = self.rows(self.everyone, split)
        return rows

    def node_sum(self, rows: IntArray, weight: FloatArray, least: int) -> FloatArray:
        """F over D from `least` up: the `weight`ed sum of the pool's `rows`."""
        total: FloatArray = weight @ self.pool[rows, least:]
        return total


def fill_on_table(
    table: RateTable,
    split: IntArray,
    alive: BoolArray,
    growable: BoolArray,
    *,
    weight: FloatArray | None,
    knee_gain: float,
) -> IntArray:
    """`lookahead`'s fill (`allocator.lookahead._fill`, which says what it promises) on the
    table: the `growable` jobs, all of them `alive`, grow one worker per GPU at a time, the
    most weighted samples/s per process first (weight 1 where None), while the worker buys
    at least `knee_gain` of its job's rate and the node's total rises."""
    split = split.copy()
    processes = int((split * alive) @ table.gpus)
    if not growable.any() or processes > table.capacity:
        return split
    rows = table.split_rows_of(split)
    members = np.flatnonzero(alive)
    growing = members if growable is alive else np.flatnonzero(growable)
    fill = _Fill(table, split, growing, rows, processes=processes, weight=weight, knee=knee_gain)
    weights = np.ones(len(members)) if weight is None else weight[members]
    fill.node = table.node_sum(rows[members], weights, processes)
    while (pick := fill.best()) >= 0:
        fill.give(pick)
    return split


class _Fill:
    """One fill's state: the split as it grows, the growing jobs' rows in the table, and the
    node's sum F over the totals of processes from the fill's first up."""

    def __init__(
        self,
        table: RateTable,
        split: IntArray,
        growing: IntArray,
        rows: IntArray,
        *,
        processes: int,
        weight: FloatArray | None,
        knee: float,
    ) -> None:
        self.table, self.split, self.knee_gain = table, split, knee
        self.growing = growing  # the indices of the jobs that may grow
        self.gpus = table.gpus[self.growing]
        self.widest, self.narrowest = int(self.gpus.max()), int(self.gpus.min())
        self.weights = None if weight is None else weight[self.growing]
        self.rows = rows[self.growing]
        self.least = self.processes = processes
        self.node = np.zeros(0)
        # Where each job's gain at D + g, and F there, lie (flat indices less D): `best`
        # reads them with one addition each.
        self.width = table.capacity + 1
        self.gain_at = self.rows * self.width + self.gpus
        self.node_at = self.gpus - processes
        # The same as Python numbers, for the steps' one job at a time.
        self.each_job, self.each_gpus = self.growing.tolist(), self.gpus.tolist()
        self.each_row, self.each_workers = self.rows.tolist(), split[self.growing].tolist()
        self.checked = -1, -1  # the last job checked for its knee, and its row one worker on

    def best(self) -> int:
        """The index (among the growing jobs) of the one whose next worker per GPU the fill
        gives now, or -1 where none is worth one. A job's gain counts what every job loses
        to the contention its processes add, F(D + g) - F(D), and its own worker's gain at
        D + g; the first job of the greatest gain per process is checked for `knee_gain`,
        and only if it fails are all checked."""
        processes = self.processes
        free = self.table.capacity - processes
        if free < self.narrowest:
            return -1
        if free >= self.widest:
            total = self.table.gains.take(self.gain_at + processes)
            node = self.node.take(self.node_at + processes)
        else:  # a job that does not fit: any column, then left out
            after = np.minimum(processes + self.gpus, self.table.capacity)
            total, node = self.table.gains[self.rows, after], self.node[after - self.least]
        if self.weights is not None:
            total *= self.weights
        # (gain + (F(D + g) - F(D))) / g, in place: a step is a few small arrays' work.
        node -= self.node[processes - self.least]
        total += node
        total /= self.gpus
        if free < self.widest:
            total[self.gpus > free] = -np.inf
        pick = int(total.argmax())
        if not total[pick] > 0.0:
            return -1
        if self._buys_its_share(pick):
            return pick
        return self._best_of_worth(total, pick)

    def _buys_its_share(self, pick: int) -> bool:
        """`_past_knee`'s contrary for one job, read from the table a number at a time."""
        processes = self.processes
        after = min(processes + self.each_gpus[pick], self.table.capacity)
        # The row of one worker more before the pool is read: computing it may grow the pool.
        more = self.table.row(self.each_job[pick], self.each_workers[pick] + 1)
        self.checked = pick, more  # `give` moves the job to that row
        now: float = self.table.pool.item(self.each_row[pick], processes)
        trial: float = self.table.pool.item(more, after)
        return trial - now >= self.knee_gain * now

    def _past_knee(self, picks: IntArray) -> BoolArray:
        """Whether each of the `picks`' next worker would buy it less than `knee_gain` of
        its rate now (at the new total of processes: its contention counted)."""
        rows, processes = self.rows[picks], self.processes
        jobs = self.growing[picks]
        rows_next = self.table.rows(jobs, self.split[jobs] + 1)
        after = np.minimum(processes + self.gpus[picks], self.table.capacity)
        now = self.table.pool[rows, processes]
        own = self.table.pool[rows_next, after] - now
        past: BoolArray = ~(own >= self.knee_gain * now)
        return past

    def _best_of_worth(self, total: FloatArray, past: int) -> int:
        """The greatest positive `total` among the jobs whose worker passes `knee_gain`, or
        -1, the job `past` being past it: the next few best are tried one at a time (the
        next is mostly worth it), then all are checked at once."""
        total = total.copy()
        for _ in range(_TRIED_ONE_AT_A_TIME):
            total[past] = -np.inf
            past = int(total.argmax())
            if not total[past] > 0.0:
                return -1
            if self._buys_its_share(past):
                return past
        total[past] = -np.inf
        worth = ~self._past_knee(np.arange(len(total))) & (total > 0.0)
        if not worth.any():
            return -1
        return int(np.argmax(np.where(worth, total, -np.inf)))

    def give(self, pick: int) -> None:
        """One worker per GPU more to the `pick`-th growing job."""
        job, gpus = self.each_job[pick], self.each_gpus[pick]
        gained = self.table.gains[self.each_row[pick], self.least :]
        self.node += gained if self.weights is None else self.weights[pick] * gained
        workers = self.each_workers[pick] = self.each_workers[pick] + 1
        self.split[job] = workers
        checked, more = self.checked
        row = more if checked == pick else self.table.row(job, workers)
        self.each_row[pick] = row
        self.rows[pick], self.gain_at[pick] = row, row * self.width + gpus
        self.processes += gpus
