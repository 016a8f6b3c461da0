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
