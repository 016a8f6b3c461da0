"""Jobs that bring their own measured curves, and the modern node built from published ones."""

from pathlib import Path
from typing import Any

import pytest

from workloads.errors import WorkloadError
from workloads.modern import (
    A100_OVER_V100,
    LOADER_PROCESSES,
    PUBLISHED,
    SYNERGY_CORES,
    arrivals_workload,
    mix_workload,
)
from workloads.simulator import simulate
from workloads.spec import JobCurve, load_workload, parse_workload
from workloads.truth import NodeTruth, RunningJob, iteration_rates

REPO = Path(__file__).resolve().parents[3]
CURVE = {"workers_per_gpu": [1, 2, 4], "samples_per_s": [100, 180, 200], "source": "test"}


def _workload(curve: dict[str, Any], truth: dict[str, Any] | None = None) -> dict[str, Any]:
    job = {"id": "a", "model": "Resnet18", "batch_size": 32, "gpus": 1, "iterations": 10}
    return {
        "node": {"gpus": 1, "cpu_workers": 4},
        "truth": truth or {},
        "jobs": [job | {"curve": curve}],
    }


def test_a_measured_curve_is_the_truth_linear_between_points_and_flat_past_the_last() -> None:
    curve = JobCurve.model_validate(CURVE).measured()
    assert curve.rate(0.5) == pytest.approx(50.0), "through the origin below the first point"
    assert curve.rate(3.0) == pytest.approx(190.0)
    assert curve.rate(9.0) == pytest.approx(200.0)
    assert curve.cheapest_cost_s == pytest.approx(1 / 100)
    job = RunningJob("a", (0,), step_time_s=32 / 200, batch_size_per_gpu=32, workers_per_gpu=3,
                     sample_cost_s=0.01, curve=curve)  # fmt: skip
    truth = NodeTruth(contention_free_workers=2.0, saturated_capacity=4.0)
    (rate,) = iteration_rates(truth, [job], loader_processes=3).values()
    assert rate == pytest.approx(curve.rate(3 * truth.efficiency(3)) / 32), "eta still applies"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"workers_per_gpu": [2, 1, 4]}, "positive and increasing"),
        ({"samples_per_s": [100, 90, 200]}, "must not fall"),
        ({"samples_per_s": [100, 200]}, "one rate per worker count"),
        ({"samples_per_s": [100, 0, 200]}, "positive numbers"),
    ],
)
def test_a_bad_curve_is_refused_naming_the_field(change: dict[str, Any], words: str) -> None:
    with pytest.raises(WorkloadError) as error:
        parse_workload(_workload(CURVE | change), "w.toml")
    assert "jobs.0.curve" in str(error.value) and words in str(error.value)


def test_a_curve_job_cannot_share_a_decoder() -> None:
    with pytest.raises(WorkloadError, match="decodes on the CPU only"):
        parse_workload(_workload(CURVE, {"decoder_cores": 10.0}), "w.toml")


def test_the_published_profiles_are_synergys_and_fit_the_planners_knee() -> None:
    # The figure: at 12 cores a job runs 1.15 to 2.94 times its rate at 3 cores.
    at_twelve = [p.relative[SYNERGY_CORES.index(12.0)] for p in PUBLISHED.values()]
    assert min(at_twelve) == 1.0 and max(at_twelve) == 2.94
    assert PUBLISHED["resnet50"].relative[SYNERGY_CORES.index(12.0)] == 1.15
    for name, published in PUBLISHED.items():
        curve = published.a100_curve()
        v100 = published.v100_samples_per_s()
        assert max(curve.samples_per_s) == pytest.approx(A100_OVER_V100 * max(v100)), name
        assert curve.samples_per_s[0] / curve.workers_per_gpu[0] == pytest.approx(
            v100[0] / SYNERGY_CORES[0]
        ), f"{name}: a core prepares as many samples for an A100 as for a V100"
        assert curve.knee().worst_error < 0.15, name


def test_no_policy_beats_the_bounds_on_the_modern_node() -> None:
    for workload in (mix_workload("vision+sequence"), arrivals_workload(seed=1, jobs=8)):
        assert workload.node.cpu_workers == LOADER_PROCESSES
        for policy in ("balance", "lookahead", "oracle", "oracle:lookahead"):
            result = simulate(workload, policy, seed=0)
            assert result.makespan_s >= result.bounds.makespan_s * (1 - 1e-9), policy
            assert (result.tpm is None) == policy.startswith("oracle"), policy


def test_splitting_by_the_curves_beats_an_even_split_where_loading_matters() -> None:
    mixed = mix_workload("vision+sequence")
    even = simulate(mixed, "balance", seed=0).throughput_samples_per_s
    assert simulate(mixed, "oracle", seed=0).throughput_samples_per_s > 1.1 * even


def test_the_shipped_modern_workload_is_the_mix_it_says() -> None:
    shipped = load_workload(REPO / "configs" / "workloads" / "modern-a100.toml")
    assert shipped == mix_workload("vision+sequence")
