"""A job submitted with what was profiled of it plans on that until its heartbeats measure
their own (issue 39, item 4): its knee's sharpness, from the body to the core's spec."""

from dataclasses import replace

import pytest
from pydantic import ValidationError

from allocator import JobSpec
from allocator.throughput import job_samples_per_s
from daemon.jobspec import JobSettings
from daemon.schemas import JobSubmission
from scheduler.curves import JobCurve, Observation
from scheduler.rates import RateModel

BODY = {"name": "profiled", "command": ["python", "train.py"], "batch_size": 64}


def spec_of(body: dict[str, object]) -> JobSpec:
    """The core's spec of the job the body submits, as stored (rates given: no model)."""
    stored = JobSubmission.model_validate(body).model_dump(exclude_none=True)
    request = JobSettings.from_spec(stored).request("j", default_max_restarts=3, restarts=0)
    return RateModel().job_spec(replace(request, step_time_s=0.1, sample_cost_s=0.01))


def test_a_profiled_knee_is_the_plans_until_the_job_measures_its_own() -> None:
    profiled = spec_of({**BODY, "knee_sharpness": 2.0})
    assert profiled.knee_sharpness == 2.0
    assert spec_of(BODY).knee_sharpness is None  # the policy's default
    # At its knee (6.4 workers' loading, its GPU's 640 samples/s), the profile's soft bend
    # predicts far less than the default's sharp one.
    assert job_samples_per_s(profiled, 7, 1.0, 8.0) < 0.85 * job_samples_per_s(
        spec_of(BODY), 7, 1.0, 8.0
    )
    # Heartbeats that do not measure a bend leave the profile's in place.
    curve = JobCurve()
    for _ in range(3):
        curve.observe(profiled, Observation(samples_per_s=600.0, idle_fraction=0.0,
                                            workers_per_gpu=8, efficiency=1.0))  # fmt: skip
    assert curve.learned(profiled).knee_sharpness == 2.0


def test_a_stored_job_from_before_the_field_has_none() -> None:
    stored = JobSubmission.model_validate(BODY).model_dump(exclude_none=True)
    assert "knee_sharpness" not in stored
    assert JobSettings.from_spec(stored).knee_sharpness is None


@pytest.mark.parametrize("bad", [0.9, 64.5, float("nan")])
def test_a_knee_out_of_range_is_refused_by_name(bad: float) -> None:
    with pytest.raises(ValidationError, match="knee_sharpness"):
        JobSubmission.model_validate({**BODY, "knee_sharpness": bad})


def test_a_profiled_curve_is_the_jobs_prior_fitted() -> None:
    # Samples/s per GPU of a knee with c = 5 ms, G = 800 per GPU and p = 4, at 1 to 12 workers.
    workers = [1.0, 2.0, 3.0, 6.0, 12.0]
    rates = [(800.0**-4 + (d / 0.005) ** -4) ** -0.25 for d in workers]
    body = {**BODY, "gpus": 2, "profile": {"workers_per_gpu": workers, "samples_per_s": rates}}
    stored = JobSubmission.model_validate(body).model_dump()
    request = JobSettings.from_spec(stored).request("j", default_max_restarts=3, restarts=0)
    spec = RateModel().job_spec(request)  # no model: the curve gives every rate
    assert spec.sample_cost_s == pytest.approx(0.005, rel=0.05)
    assert spec.max_samples_per_s == pytest.approx(2 * 800.0, rel=0.05)
    assert spec.knee_sharpness is not None
    # Its predictions at the measured points are the measurements (both GPUs; the fit also
    # weighs the whole worker counts between points, read off them linearly).
    for at, rate in zip(workers, rates, strict=True):
        assert job_samples_per_s(spec, round(at), 1.0) == pytest.approx(2 * rate, rel=0.04)


def test_a_curve_that_falls_is_refused_with_the_fix() -> None:
    curve = {"workers_per_gpu": [1, 2, 4], "samples_per_s": [300, 500, 400]}
    with pytest.raises(ValidationError, match="average repeated measurements first"):
        JobSubmission.model_validate({**BODY, "profile": curve})
