"""The one conversion of a job to the allocator's JobSpec: the rates it states, the rest
predicted by a throughput model. The daemon's jobs, the simulator's and `stoker allocate`'s
request files all go through `job_spec`."""

from dataclasses import dataclass, replace
from typing import Protocol

from allocator import InvalidRequest, JobSpec, ThroughputModel
from scheduler.request import DEFAULT_PIPELINE, JobRequest, device_pipeline
from tpm.errors import UnknownPipeline


class RatedJob(Protocol):
    """What a job may say of itself; what it leaves out a model predicts."""

    @property
    def id(self) -> str: ...
    @property
    def gpus(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def model_params(self) -> float: ...
    @property
    def flops(self) -> float | None: ...
    @property
    def pipeline(self) -> str | None: ...
    @property
    def step_time_s(self) -> float | None: ...
    @property
    def sample_cost_s(self) -> float | None: ...
    @property
    def device_sample_cost_s(self) -> float | None: ...


def job_spec(job: RatedJob, model: ThroughputModel | None, *, where: str, no_model: str) -> JobSpec:
    """`job` with its predicted step time and sample cost. InvalidRequest names the field
    (`where`.step_time_s) when neither the job nor `model` can give it; `no_model` says
    what to do about a missing model."""
    step_time_s = job.step_time_s
    if step_time_s is None:
        if model is None or job.flops is None:
            raise InvalidRequest(f"{where}.step_time_s", f"missing: give it, or {no_model}")
        step_time_s = model.predict_step_time_s(
            batch_size_per_gpu=job.batch_size / job.gpus,
            flops=job.flops,
            model_params=job.model_params,
            gpus=job.gpus,
        )
    sample_cost_s = job.sample_cost_s
    pipeline = job.pipeline or DEFAULT_PIPELINE
    if sample_cost_s is None:
        if model is None or job.pipeline is None:
            raise InvalidRequest(f"{where}.sample_cost_s", f"missing: give it, or {no_model}")
        sample_cost_s = model.predict_sample_cost_s(pipeline)
    return JobSpec(
        id=job.id,
        gpus=job.gpus,
        batch_size=job.batch_size,
        model_params=job.model_params,
        step_time_s=step_time_s,
        sample_cost_s=sample_cost_s,
        device_sample_cost_s=_device_cost(job, model, pipeline),
    )


def _device_cost(job: RatedJob, model: ThroughputModel | None, pipeline: str) -> float | None:
    """c' as the job states it, or the model's fit of the device variant of its pipeline;
    None when neither exists (the job then only decodes on the CPU)."""
    if job.device_sample_cost_s is not None or model is None:
        return job.device_sample_cost_s
    try:
        return model.predict_sample_cost_s(device_pipeline(pipeline))
    except UnknownPipeline:
        return None


@dataclass(frozen=True)
class RateModel:
    """Predicts each job's rates with a ThroughputModel unless the job states them. Without
    a model, every job must state its step time and sample cost."""

    model: ThroughputModel | None = None

    def job_spec(self, request: JobRequest) -> JobSpec:
        """The job's predicted step time and sample cost, as the allocator wants them."""
        spec = job_spec(
            request, self.model, where=f"jobs[{request.id}]", no_model="load a throughput model"
        )
        if request.knee_sharpness is None:
            return spec
        return replace(spec, knee_sharpness=request.knee_sharpness)
