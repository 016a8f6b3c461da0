"""The request `stoker allocate` reads says everything a plan uses (issue 39, item 4)."""

import pytest
from pydantic import ValidationError

from allocator import allocate
from allocator.throughput import job_samples_per_s
from daemon.schemas.planning import AllocationRequestBody


def body(**fields: object) -> dict[str, object]:
    job = {"id": "a", "gpus": 1, "batch_size": 64, "model_params": 1e6}
    job |= {"step_time_s": 0.1, "sample_cost_s": 0.01, "remaining_samples": 1e5}
    return {"node": {"cpu_workers": 8}, "jobs": [job | fields]}


def test_a_jobs_own_knee_sharpness_reaches_the_plan() -> None:
    soft = AllocationRequestBody.model_validate(body(knee_sharpness=1.5)).to_request()
    assert soft.jobs[0].knee_sharpness == 1.5
    default = AllocationRequestBody.model_validate(body()).to_request()
    assert default.jobs[0].knee_sharpness is None
    # At 10 workers (loaders for 1,000 samples/s, its GPU's 640) a soft bend gives it far
    # less than the default's sharp one; the plan predicts with the job's own.
    on_soft, on_default = (job_samples_per_s(r.jobs[0], 10, 1.0, 8.0) for r in (soft, default))
    assert on_soft < 0.8 * on_default
    plan = allocate(soft, "lookahead")
    workers = plan.allocations["a"].workers_per_gpu
    assert plan.allocations["a"].predicted_samples_per_s == pytest.approx(
        job_samples_per_s(soft.jobs[0], workers, plan.efficiency, 8.0)
    )


@pytest.mark.parametrize("bad", [0.5, 65.0, float("inf")])
def test_a_knee_sharpness_out_of_range_is_refused_by_name(bad: float) -> None:
    with pytest.raises(ValidationError, match="knee_sharpness"):
        AllocationRequestBody.model_validate(body(knee_sharpness=bad))


def knee_points(cost_s: float, peak: float, power: float) -> dict[str, list[float]]:
    """Samples/s per GPU of a smooth knee at 1 to 16 workers per GPU."""
    workers = [1.0, 2.0, 4.0, 8.0, 16.0]
    rates = [(peak**-power + (d / cost_s) ** -power) ** (-1.0 / power) for d in workers]
    return {"workers_per_gpu": workers, "samples_per_s": rates}


def test_a_measured_curve_is_planned_on_its_fit() -> None:
    job = {"id": "a", "gpus": 2, "batch_size": 256, "model_params": 1e6}
    curve = knee_points(cost_s=0.004, peak=900.0, power=3.0)
    request = AllocationRequestBody.model_validate(
        {"node": {"cpu_workers": 32}, "jobs": [job | {"profile": curve}]}
    ).to_request()
    (spec,) = request.jobs
    assert spec.sample_cost_s == pytest.approx(0.004, rel=0.05)
    assert spec.max_samples_per_s == pytest.approx(2 * 900.0, rel=0.05)  # both GPUs
    # The fit weighs the whole worker counts between the points too, read off the points
    # linearly: under a concave curve, so its bend comes out a little softer.
    assert spec.knee_sharpness == pytest.approx(3.0, abs=0.4)
    # The plan predicts the measured rate where it puts the job (8 workers a GPU or more,
    # the curve's own points, as the job alone on a contention-free node).
    plan = allocate(request, "lookahead")
    workers = plan.allocations["a"].workers_per_gpu
    measured = 2 * (900.0**-3 + (workers / 0.004) ** -3) ** (-1 / 3)
    assert plan.allocations["a"].predicted_samples_per_s == pytest.approx(measured, rel=0.03)
    # Its own knee_sharpness stands over the fit's.
    sharp = AllocationRequestBody.model_validate(
        {"node": {"cpu_workers": 32}, "jobs": [job | {"profile": curve, "knee_sharpness": 12}]}
    ).to_request()
    assert sharp.jobs[0].knee_sharpness == 12


@pytest.mark.parametrize(
    ("curve", "said"),
    [
        (
            {"workers_per_gpu": [1, 2], "samples_per_s": [300, 500, 600]},
            "give one rate per worker count",
        ),
        ({"workers_per_gpu": [2, 1], "samples_per_s": [1, 2]}, "positive and increasing"),
        ({"workers_per_gpu": [1, 2], "samples_per_s": [500, 300]}, "must not fall"),
        (
            {"workers_per_gpu": [1, 2, 4, 8], "samples_per_s": [210, 400, 300, 100]},
            "falls from 400 at 2 workers to 300 at 4",
        ),
        ({"workers_per_gpu": [1, 2], "samples_per_s": [300, 1e300]}, "at most 1e"),
        ({"workers_per_gpu": [1, 1e9], "samples_per_s": [300, 400]}, "at most 4096"),
    ],
)
def test_a_curve_that_cannot_be_is_refused_with_the_fix(
    curve: dict[str, list[float]], said: str
) -> None:
    with pytest.raises(ValidationError, match=said):
        AllocationRequestBody.model_validate(body(profile=curve))


def test_a_curve_and_given_rates_are_refused_together() -> None:
    curve = knee_points(0.004, 900.0, 3.0)
    with pytest.raises(ValidationError, match="give a profile or step_time_s and sample_cost_s"):
        AllocationRequestBody.model_validate(body(profile=curve))
