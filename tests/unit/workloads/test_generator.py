import itertools
import statistics
import tomllib
from dataclasses import replace

import pytest

from workloads.errors import WorkloadError
from workloads.generator import DEFAULT_MODELS, GeneratorOptions, generate_workload
from workloads.simulator import simulate
from workloads.spec import dump_workload, parse_workload

MANY = GeneratorOptions(jobs=2000, seed=11, mean_interarrival_s=100.0)


def gaps(options: GeneratorOptions) -> list[float]:
    arrivals = [job.arrival_s for job in generate_workload(options).jobs]
    return [later - earlier for earlier, later in itertools.pairwise(arrivals)]


def test_same_seed_same_workload_other_seed_other_workload() -> None:
    options = GeneratorOptions(jobs=20, seed=5)
    first, again = generate_workload(options), generate_workload(options)
    other = generate_workload(replace(options, seed=6))
    assert first == again
    assert [j.model for j in other.jobs] != [j.model for j in first.jobs]
    assert [j.arrival_s for j in other.jobs] != [j.arrival_s for j in first.jobs]


@pytest.mark.parametrize("seed", [0, 1])
def test_poisson_arrivals_have_the_mean_gap_and_exponential_spread(seed: int) -> None:
    spacing = gaps(replace(MANY, seed=seed))
    assert generate_workload(replace(MANY, jobs=3, seed=seed)).jobs[0].arrival_s == 0.0
    assert all(gap >= 0 for gap in spacing)
    mean = statistics.fmean(spacing)
    assert mean == pytest.approx(100.0, rel=0.08)
    # An exponential's standard deviation equals its mean; a uniform or fixed gap would not.
    assert statistics.stdev(spacing) / mean == pytest.approx(1.0, abs=0.1)
    assert sum(gap < 100.0 for gap in spacing) / len(spacing) == pytest.approx(0.632, abs=0.04)


def test_jobs_draw_only_from_the_given_choices() -> None:
    options = GeneratorOptions(
        jobs=300,
        seed=3,
        models=("Resnet18", "smVGG7"),
        batch_sizes=(16, 48),
        gpu_counts=(1, 2),
        min_iterations=10,
        max_iterations=20,
        gpus=2,
        cpu_workers=12,
    )
    workload = generate_workload(options)
    assert {j.model for j in workload.jobs} == {"Resnet18", "smVGG7"}
    assert {j.gpus for j in workload.jobs} == {1, 2}
    assert {j.batch_size // j.gpus for j in workload.jobs} == {16, 48}
    assert all(j.batch_size % j.gpus == 0 for j in workload.jobs)
    assert {j.iterations for j in workload.jobs} == set(range(10, 21))
    assert (workload.node.gpus, workload.node.cpu_workers) == (2, 12)
    assert all(j.gpu_indices is None for j in workload.jobs)


def test_the_default_mix_is_the_paper_families_and_gpu_counts_fit_the_node() -> None:
    workload = generate_workload(GeneratorOptions(jobs=400, seed=2, gpus=2))
    models = {j.model for j in workload.jobs}
    assert models == set(DEFAULT_MODELS)
    assert any(m.startswith("sm") for m in models) and any(m.startswith("md") for m in models)
    assert {j.gpus for j in workload.jobs} == {1, 2}  # the default 4 does not fit
    assert {j.batch_size // j.gpus for j in workload.jobs} == {32, 64, 128}


def test_given_arrivals_are_kept_in_order() -> None:
    arrivals = (0.0, 120.0, 420.0, 420.0, 800.0)
    workload = generate_workload(GeneratorOptions(jobs=5, arrivals_s=arrivals))
    assert tuple(j.arrival_s for j in workload.jobs) == arrivals
    assert "given arrival times" in workload.description


def test_round_trip_through_toml() -> None:
    workload = generate_workload(GeneratorOptions(jobs=25, seed=9, mean_interarrival_s=33.3))
    data = tomllib.loads(dump_workload(workload))
    assert parse_workload(data, "round trip") == workload


def test_a_small_generated_workload_simulates_to_completion() -> None:
    options = GeneratorOptions(
        jobs=6, seed=4, mean_interarrival_s=30.0, min_iterations=50, max_iterations=150
    )
    workload = generate_workload(options)
    result = simulate(workload, "waa", 0)
    assert [j.id for j in result.jobs] == [j.id for j in workload.jobs]
    for done, spec in zip(result.jobs, workload.jobs, strict=True):
        assert spec.arrival_s <= done.start_s < done.end_s
        assert done.samples == spec.iterations * spec.batch_size


@pytest.mark.parametrize(
    ("changes", "option", "words"),
    [
        ({"jobs": 0}, "--jobs", "at least 1"),
        ({"mean_interarrival_s": 0.0}, "--mean-interarrival-s", "positive"),
        ({"arrivals_s": (0.0, 5.0)}, "--arrivals", "2 times for 3 jobs"),
        ({"arrivals_s": (0.0, 9.0, 5.0)}, "--arrivals", "in order"),
        ({"arrivals_s": (0.0, 1.0, 2.0), "mean_interarrival_s": 5.0}, "--arrivals", "not both"),
        ({"models": ("Resnet18", "Alexnet")}, "--models", "'Alexnet'"),
        ({"models": ("VGG99",)}, "--models", "VGG99"),
        ({"models": ()}, "--models", "at least one"),
        ({"batch_sizes": (0,)}, "--batch-sizes", "at least 1"),
        ({"gpu_counts": (1, 8)}, "--gpu-counts", "8 GPUs do not fit a node of 4"),
        ({"min_iterations": 20, "max_iterations": 10}, "--min-iterations", "<="),
        ({"gpus": 0}, "--gpus", "at least 1"),
        ({"cpu_workers": 0}, "--cpu-workers", "at least 1"),
    ],
)
def test_bad_options_name_the_option_and_the_fix(
    changes: dict[str, object], option: str, words: str
) -> None:
    with pytest.raises(WorkloadError) as raised:
        generate_workload(replace(GeneratorOptions(jobs=3), **changes))  # type: ignore[arg-type]
    assert raised.value.where == option
    assert words in raised.value.message
