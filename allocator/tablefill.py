"""`lookahead`'s fill on the rate table (allocator/ratetable.py): the free loader processes
handed out one worker per GPU at a time, each rate looked up.

A worker for job j moves the node's total D to D + g_j (its GPUs). What the node gains is j's
own gain at the new efficiency plus what every running job's rate changes by as eta(D) falls
to eta(D + g_j); the second part is the same for every job on g_j GPUs, and it is a
difference of one sum over the node, F(D) = sum of each job's weighted rate at its own d and
at total D, kept as one row over D and updated as each worker is handed out. A step of the
fill then costs a few lookups per job rather than rating an n x n matrix of trial splits, for
the same choices (tests/unit/allocator/test_ratetable.py holds the fill to the plain greedy's
picks on random nodes, contention and all).

A step is a few small arrays' work, so what is left is made cheap: the gains are read
through views from D on (no array of indices per step), jobs on as many GPUs share one
F(D + g) - F(D) (a number, not an array), and the common step runs on local names. A fill
that no job fits a worker more in is not set up at all, and an unweighted fill is worked out
once per plan (`RateTable.fills`): a plan's fluid models meet the same fills again, as a
refinement's trials differ from its split in a few jobs.
"""

import struct

import numpy as np

from allocator.ratetable import BoolArray, FloatArray, IntArray, RateTable

# Jobs past their knee `_Fill` checks one at a time, before it checks every job at once.
_TRIED_ONE_AT_A_TIME = 3
# The reductions themselves, without the array methods' Python wrappers (a fill is short).
_least, _most = np.minimum.reduce, np.maximum.reduce


def fill_on_table(
    table: RateTable,
    split: IntArray,
    alive: BoolArray,
    growable: BoolArray,
    *,
    weight: FloatArray | None,
    knee_gain: float,
    key: bytes | None = None,
) -> IntArray:
    """`lookahead`'s fill (`allocator.lookahead._fill`, which says what it promises) on the
    table: the `growable` jobs, all of them `alive`, grow one worker per GPU at a time, the
    most weighted samples/s per process first (weight 1 where None), while the worker buys
    at least `knee_gain` of its job's rate and the node's total rises. An unweighted fill is
    worked out once per plan (`key`: `fill_key`'s, where the caller has it)."""
    if weight is not None:
        return _fill_from(table, split, alive, growable, weight=weight, knee_gain=knee_gain)
    key = fill_key(split, alive, growable, knee_gain) if key is None else key
    known = remembered_fill(table, key, split)
    if known is not None:
        return known
    grown = _fill_from(table, split, alive, growable, weight=None, knee_gain=knee_gain)
    table.fills[key] = grown - split
    return grown


def fill_key(split: IntArray, alive: BoolArray, growable: BoolArray, knee_gain: float) -> bytes:
    """What an unweighted fill depends on: the alive jobs' workers (each at least one: a dead
    job's 0 tells it apart), which may grow, and the knee."""
    return np.where(alive, split, 0).tobytes() + growable.tobytes() + struct.pack("d", knee_gain)


def remembered_fill(table: RateTable, key: bytes, split: IntArray) -> IntArray | None:
    """The split of the unweighted fill from `split` (`key`: `fill_key`'s) where the plan
    has worked it out before; else None."""
    given = table.fills.get(key)
    return None if given is None else split + given


def _fill_from(
    table: RateTable,
    split: IntArray,
    alive: BoolArray,
    growable: BoolArray,
    *,
    weight: FloatArray | None,
    knee_gain: float,
) -> IntArray:
    """`fill_on_table`, worked out."""
    split = split.copy()
    processes = int((split * alive) @ table.gpus)
    members = np.flatnonzero(alive)
    growing = members if growable is alive else np.flatnonzero(growable)
    if not len(growing) or table.capacity - processes < _least(table.gpus[growing]):
        return split  # no job may grow, or none fits a worker more
    rows = table.split_rows_of(split)
    fill = _Fill(table, split, growing, rows, processes=processes, weight=weight, knee=knee_gain)
    weights = np.ones(len(members)) if weight is None else weight[members]
    fill.node = table.node_sum(rows[members], weights, processes)
    fill.run()
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
        self.widest, self.narrowest = int(_most(self.gpus)), int(_least(self.gpus))
        self.weights = None if weight is None else weight[self.growing]
        self.rows = rows[self.growing]
        self.least = self.processes = processes
        self.node = np.zeros(0)
        # Where each job's gain at D + g lies in the table, flat, less D.
        self.width = table.capacity + 1
        self.gain_at = self.rows * self.width + self.gpus
        # The same as Python numbers, for the steps' one job at a time.
        self.each_job, self.each_gpus = self.growing.tolist(), self.gpus.tolist()
        self.each_row, self.each_workers = self.rows.tolist(), split[self.growing].tolist()
        self.checked = -1, -1  # the last job checked for its knee, and its row one worker on

    def run(self) -> None:
        """Give the growing jobs workers, one worker per GPU at a time, until none is worth
        one. A job's gain counts what every job loses to the contention its processes add,
        F(D + g) - F(D), and its own worker's gain at D + g; the first job of the greatest
        gain per process is checked for `knee_gain`, and only if it fails are the others
        (`_best_of_worth`). The common step is worked out here on local names: a step is a
        few small arrays' work, and Python's calls and lookups would otherwise cost as much
        again."""
        table, knee, width, least = self.table, self.knee_gain, self.width, self.least
        each_job, each_gpus, each_row = self.each_job, self.each_gpus, self.each_row
        each_workers, split, rows, gain_at = self.each_workers, self.split, self.rows, self.gain_at
        while True:
            processes = self.processes
            if table.capacity - processes < self.narrowest:
                return  # no job fits a worker more
            total = self._totals(processes)
            pick = int(total.argmax())
            if not total.item(pick) > 0.0:
                return
            gpus, job, workers = each_gpus[pick], each_job[pick], each_workers[pick] + 1
            known = table.row_of  # `row`'s lookup, where the row is there
            more = known.item(job, workers) if workers < known.shape[1] else -1
            if more < 0:
                more = table.row(job, workers)  # before the pool is read: it may grow it
            now: float = table.pool.item(each_row[pick], processes)
            if not table.pool.item(more, processes + gpus) - now >= knee * now:
                pick = self._best_of_worth(total, pick)  # past its knee: the next best
                if pick < 0:
                    return
                self.give(pick)
                continue
            gained = table.gains[each_row[pick], least:]
            self.node += gained if self.weights is None else self.weights[pick] * gained
            each_workers[pick] = split[job] = workers
            each_row[pick] = rows[pick] = more
            gain_at[pick] = more * width + gpus
            self.processes = processes + gpus

    def _totals(self, processes: int) -> FloatArray:
        """Each growing job's gain per process, `run`'s: its own gain at D + g plus
        F(D + g) - F(D), over g; -inf for a job whose GPUs outnumber the free processes."""
        # Views from D on, read at each job's offset: no array of indices made per step. A
        # job that does not fit reads past its row, or is clipped at the end: left out below.
        total: FloatArray = self.table.gains.ravel()[processes:].take(self.gain_at, mode="clip")
        if self.weights is not None:
            total *= self.weights
        here = self.node.item(processes - self.least)
        if self.narrowest == self.widest:  # one job's F(D + g) - F(D) is every job's
            total += self.node.item(processes + self.widest - self.least) - here
            if self.widest != 1:
                total /= self.widest
            return total  # (every job fits: `run` asks only where one does)
        # (gain + (F(D + g) - F(D))) / g, in place
        node = self.node[processes - self.least :].take(self.gpus, mode="clip")
        node -= here
        total += node
        total /= self.gpus
        free = self.table.capacity - processes
        if free < self.widest:
            total[self.gpus > free] = -np.inf
        return total

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
