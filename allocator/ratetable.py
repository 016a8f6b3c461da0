"""The rates `lookahead` fills by, looked up instead of computed one worker at a time.

`lookahead`'s fill hands a node's free loader processes out one worker per GPU at a time,
each to the job whose worker buys the most samples/s on the node. On a GPU node a job's rate
depends on two numbers only: its own workers per GPU d, and the node's total of loader
processes D, through the contention efficiency eta(D). Both are small integers (D is at most
the node's capacity), so every rate a fill can ask for is an entry of one table per job,
rate[d][D]; a row of it (one d, every D) is computed once per plan, when a fill first needs
it, with the very expression `lookahead` rates splits by, so each entry is the same number.

The fill itself (allocator/tablefill.py) reads a worker's worth from these rows: its own
gain and the difference of one node-wide sum over D. Only the order of the additions differs
from rating every trial split, so two jobs whose gains agree to the last bits of a double
could swap (tests/unit/allocator/test_ratetable.py holds the fill to the plain greedy's picks
on random nodes, contention and all).

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
    # Whether every rate computed so far is positive and finite, as a spec in range makes
    # them: then the fluid model need not check each split's rates it reads here.
    all_positive: bool = field(init=False, default=True)
    efficiency: FloatArray = field(init=False)
    levels: FloatArray = field(init=False)  # the distinct values of eta over the totals
    level_of: IntArray = field(init=False)  # each total's index in `levels`
    # The rows of the splits rated so far: a fluid model rates one split at many totals.
    split_rows: dict[bytes, IntArray] = field(init=False, default_factory=dict)
    # The workers each unweighted fill gave, by what it started from: a plan's predictions
    # meet the same splits again (a refinement's trials differ from its split in a few jobs,
    # and once those finish the fluid models often run alike).
    fills: dict[bytes, IntArray] = field(init=False, default_factory=dict)

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
        most = int(np.maximum.reduce(workers))
        if (most // _BLOCK + 1) * _BLOCK > self.row_of.shape[1]:  # room for its whole block
            wider = np.full((len(self.gpus), 2 * most + _BLOCK), -1, dtype=np.int64)
            wider[:, : self.row_of.shape[1]] = self.row_of
            self.row_of = wider
        found: IntArray = self.row_of[jobs, workers]
        if np.minimum.reduce(found) < 0:
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
        if self.all_positive and not ((rates > 0.0) & (rates < np.inf)).all():
            self.all_positive = False
        rates = rates.reshape(len(pairs), _BLOCK + 1, -1)
        levels = len(self.levels)
        own = rates[:, :-1].reshape(last - first, levels)
        gains = (rates[:, 1:] - rates[:, :-1]).reshape(last - first, levels)
        # (The indices are in range: "clip" only spares the copy through a buffer "raise" makes.)
        np.take(own, self.level_of, axis=1, out=self.pool[first:last], mode="clip")
        np.take(gains, self.level_of, axis=1, out=self.gains[first:last], mode="clip")
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
