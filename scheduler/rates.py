"""Turning a submitted job into the allocator's JobSpec through a throughput model."""

from dataclasses import dataclass

from allocator import InvalidRequest, JobSpec, ThroughputModel
from scheduler.messages import JobRequest, device_pipeline
from tpm.errors import UnknownPipeline


@dataclass(frozen=True)
class RateModel:
    """Predicts each job's rates with a ThroughputModel unless the job states them. Without
    a model, every job must state its step time and sample cost."""

    model: ThroughputModel | None = None

    def job_spec(self, request: JobRequest) -> JobSpec:
        """The job's predicted step time and sample cost, as the allocator wants them."""
        step_time_s = request.step_time_s
        if step_time_s is None:
            step_time_s = self._model(request, "step_time_s").predict_step_time_s(
                batch_size_per_gpu=request.batch_size / request.gpus,
                flops=request.flops,
                model_params=request.model_params,
                gpus=request.gpus,
            )
        sample_cost_s = request.sample_cost_s
        if sample_cost_s is None:
            sample_cost_s = self._model(request, "sample_cost_s").predict_sample_cost_s(
                request.pipeline
            )
        return JobSpec(
            id=request.id,
            gpus=request.gpus,
            batch_size=request.batch_size,
            model_params=request.model_params,
            step_time_s=step_time_s,
            sample_cost_s=sample_cost_s,
            device_sample_cost_s=self._device_cost(request),
        )

    def _device_cost(self, request: JobRequest) -> float | None:
        """c' as the job states it, or the model's fit of the device variant of its
        pipeline; None when neither exists (the job then only decodes on the CPU)."""
        if request.device_sample_cost_s is not None or self.model is None:
            return request.device_sample_cost_s
        try:
            return self.model.predict_sample_cost_s(device_pipeline(request.pipeline))
        except UnknownPipeline:
            return None

    def _model(self, request: JobRequest, field: str) -> ThroughputModel:
        if self.model is None:
            raise InvalidRequest(
                f"jobs[{request.id}].{field}", "missing, and no throughput model is loaded"
            )
        return self.model
