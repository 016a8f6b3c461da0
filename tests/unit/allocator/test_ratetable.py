"""`lookahead`'s fill on the rate table makes the plain greedy's choices, from the same rates."""

import random
from dataclasses import replace

import numpy as np
import pytest

import allocator.lookahead as lookahead_module
from allocator import AllocationRequest, ContentionCurve, InvalidRequest
from allocator.jobarrays import JobArrays
from allocator.lookahead import KNEE_SHARPNESS, lookahead, predict_finishes
from allocator.ratetable import RateTable
from tests.unit.allocator.builders import make_job, make_request


def random_request(
    seed: int, *, jobs: int = 10, running: bool = False, gpus: tuple[int, ...] = (1, 2, 4)
) -> AllocationRequest:
    """Jobs on 1, 2 or 4 GPUs (or `gpus`), some bending early, some with waits no worker
    shortens, on a node with twice their GPUs in loader processes, whose contention sets in
    at 0.6 of its capacity and falls to 0.7 at 1.3 of it (the bench's node,
    bench/bench_allocator.py)."""
    rng = random.Random(seed)
    specs = []
    for index in range(jobs):
        on = rng.choice(gpus)
        job = make_job(
            f"j{index}",
            gpus=on,
            batch_size=rng.choice((64, 128, 256)) * on,
            step_time_s=rng.uniform(0.03, 0.4),
            sample_cost_s=rng.uniform(0.004, 0.02),
            remaining_samples=rng.uniform(1e4, 1e6),
            current_workers_per_gpu=rng.choice((None, 1, 2, 3)) if running else None,
        )
        job = replace(
            job,
            knee_sharpness=rng.choice((None, 2.5, 4.0)),
            overhead_s=rng.choice((0.0, 0.2 / job.max_samples_per_s)),
            pause_cost_s=rng.uniform(1.0, 30.0),
        )
        specs.append(job)
    capacity = 2 * sum(job.gpus for job in specs)
    curve = ((1.0, 1.0), (0.6 * capacity, 1.0), (1.3 * capacity, 0.7))
    return make_request(*specs, cpu_workers=capacity, contention=curve)


@pytest.mark.parametrize("seed", range(12))
def test_the_table_rates_every_split_as_the_jobs_do(seed: int) -> None:
    """The same doubles: any difference could turn a choice."""
    jobs = JobArrays.of(random_request(seed))
    assert jobs.table is not None
    rng = np.random.default_rng(seed)
    plain = replace(jobs, table=None)
    for _ in range(20):
        split = rng.integers(1, 6, size=len(jobs.gpus))
        alive = rng.random(len(split)) < 0.7
        assert np.array_equal(jobs.rates(split, alive), plain.rates(split, alive))


def test_the_table_grows_as_splits_ask_for_more_workers() -> None:
    """Rows are worked out as splits first ask for them, and the table grows to hold them:
    each rate read as it grows is the jobs' own."""
    request = random_request(5, jobs=2)
    request = replace(request, node=replace(request.node, cpu_workers=800))
    jobs = JobArrays.of(request)
    plain, everyone = replace(jobs, table=None), np.ones(2, dtype=bool)
    for workers in range(1, 200, 3):
        split = np.array([workers, 1 + workers // 2])
        assert np.array_equal(jobs.rates(split, everyone), plain.rates(split, everyone))
        assert np.array_equal(
            jobs.rates(np.stack([split, split + 1]), everyone),
            plain.rates(np.stack([split, split + 1]), everyone),
        )


@pytest.mark.parametrize("gpus", [(1, 2, 4), (1,), (2,)])
@pytest.mark.parametrize("seed", range(40))
def test_the_fill_on_the_table_gives_the_workers_the_plain_greedy_gives(
    seed: int, gpus: tuple[int, ...]
) -> None:
    """From random splits, for random jobs alive and growing, weighted or not, across the
    node's contention: each worker goes to the job the greedy's rating of every trial split
    picks (`_fill_by_rating`), and the fill stops where it stops. (Jobs on as many GPUs each
    take a shorter step, one sum's difference being every job's.) Asked again, the fill the
    plan remembers is the one it worked out."""
    jobs = JobArrays.of(random_request(seed, jobs=12, gpus=gpus))
    rng = np.random.default_rng(seed)
    count = len(jobs.gpus)
    for _ in range(6):
        split = rng.integers(1, 4, size=count)
        alive = rng.random(count) < 0.8
        growable = alive & (rng.random(count) < 0.7)
        weight = None if rng.random() < 0.5 else 1.0 / jobs.peak
        fast = lookahead_module._fill(jobs, split, alive, growable, weight)
        plain = lookahead_module._fill_by_rating(
            jobs, split, alive, growable, np.ones(count) if weight is None else weight
        )
        assert fast.tolist() == plain.tolist()
        again = lookahead_module._fill(jobs, split, alive, growable, weight)
        assert again.tolist() == fast.tolist()


def test_the_fill_on_the_table_stops_at_the_knee_on_a_node_without_contention() -> None:
    """Contention-free, a job's worker is worth giving until it buys under `KNEE_GAIN` of its
    rate: the stop that the contention's losses never reach first."""
    request = random_request(3, jobs=4)
    free_node = replace(request.node, cpu_workers=400, contention=ContentionCurve.contention_free())
    jobs = JobArrays.of(replace(request, node=free_node))
    ones, everyone = np.ones(4, dtype=np.int64), np.ones(4, dtype=bool)
    fast = lookahead_module._fill(jobs, ones, everyone, everyone)
    plain = lookahead_module._fill_by_rating(jobs, ones, everyone, everyone, np.ones(4))
    assert fast.tolist() == plain.tolist()
    assert int(jobs.gpus @ fast) < 400, "stopped by the knee, not the node"


def test_on_a_cpu_node_the_fill_rates_every_split() -> None:
    """One budget of cores makes every job's rate depend on the whole split: no table."""
    job = replace(make_job("a", remaining_samples=1e4), cpu_cost_s=0.01, core_share=0.5)
    request = make_request(job, replace(job, id="b"), cpu_workers=8)
    request = replace(request, node=replace(request.node, cpu_cores=4.0))
    assert JobArrays.of(request).table is None


@pytest.mark.parametrize("seed", range(8))
def test_a_finish_whose_freed_processes_no_job_can_use_changes_nothing(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fluid model skips the fill where no job could save its pause (`may_grow`): the
    finishes are those of always filling (on a table of its own, which remembers no fill)."""
    request = random_request(seed, jobs=8, running=True)
    jobs = JobArrays.of(request)
    split = lookahead_module._candidates(jobs)["greedy"]
    skipping = predict_finishes(jobs, split)
    monkeypatch.setattr(lookahead_module, "may_grow", lambda *_, **__: True)
    assert predict_finishes(JobArrays.of(request), split).tolist() == skipping.tolist()


@pytest.mark.parametrize("seed", range(6))
def test_plans_are_those_of_rating_every_split(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole plans, running jobs and all: the table changes the time a plan takes, not the
    plan."""
    request = random_request(seed, jobs=8, running=seed % 2 == 1)
    fast = lookahead(request)
    of = JobArrays.of

    def without_table(request: AllocationRequest) -> JobArrays:
        return replace(of(request), table=None)

    monkeypatch.setattr(JobArrays, "of", without_table)
    plain = lookahead(request)
    assert fast.workers() == plain.workers() and fast.notes == plain.notes
    assert fast.predicted_makespan_s == plain.predicted_makespan_s
    assert fast.balance_makespan_s == plain.balance_makespan_s
    assert fast.knee_sharpness == KNEE_SHARPNESS


def test_a_rate_out_of_range_is_refused_though_read_off_the_table() -> None:
    """The fluid model checks the rates it reads unless every rate of the table is positive
    and finite: a job whose rate is not still stops the prediction, rather than never
    finishing."""
    jobs = JobArrays.of(random_request(1, jobs=4))
    peak = jobs.peak.copy()
    peak[2] = np.nan
    table = RateTable(
        jobs.gpus, jobs.cost, peak, jobs.sharpness, jobs.overhead, jobs.capacity, jobs.contention
    )
    broken = replace(jobs, peak=peak, table=table)
    with pytest.raises(InvalidRequest):
        predict_finishes(broken, np.ones(4, dtype=np.int64))
    assert not table.all_positive
    assert jobs.table is not None
    predict_finishes(jobs, np.ones(4, dtype=np.int64))
    assert jobs.table.all_positive
