"""Request bodies at the edges (CLI files now, REST later), validated by pydantic.

Field names are the ones DESIGN.md's machine-readable contracts fix. Unknown fields are
refused so that a misspelt key (`step_time` for `step_time_s`) is an error, not a silent
default.
"""

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from allocator import (
    AllocationRequest,
    ContentionCurve,
    InvalidRequest,
    JobSpec,
    NodeSpec,
    ThroughputModel,
)


class NodeBody(BaseModel):
    """The node: loader processes C, decoder capacity K (samples/s), contention eta(D)."""

    model_config = ConfigDict(extra="forbid")

    cpu_workers: int = Field(ge=1, description="loader processes the node allows (C)")
    decoder_capacity: float = Field(0.0, ge=0.0, description="decoder samples/s; 0 = none")
    contention: list[tuple[float, float]] | None = Field(
        None, description="eta(D) as [processes, eta] points; omitted = from --tpm or none"
    )


class JobBody(BaseModel):
    """One job: either its predicted rates, or the features a TPM predicts them from."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    gpus: int = Field(ge=1)
    batch_size: int = Field(ge=1, description="global batch B")
    model_params: float = Field(gt=0.0)
    step_time_s: float | None = Field(None, gt=0.0, description="1/mu; or give flops + --tpm")
    sample_cost_s: float | None = Field(None, gt=0.0, description="c; or give pipeline + --tpm")
    device_sample_cost_s: float | None = Field(None, gt=0.0)
    flops: float | None = Field(None, gt=0.0, description="forward FLOPs per sample")
    pipeline: str | None = Field(None, min_length=1, description="preprocessing pipeline id")
    current_workers_per_gpu: int | None = Field(None, ge=1)
    remaining_samples: float | None = Field(
        None, ge=0.0, allow_inf_nan=False, description="work left; orders optimal's ties"
    )


class AllocationRequestBody(BaseModel):
    """What `stoker allocate` reads."""

    model_config = ConfigDict(extra="forbid")

    node: NodeBody
    jobs: list[JobBody]
    fair_floor: float = Field(0.8, ge=0.0, le=1.0)

    def to_request(self, model: ThroughputModel | None = None) -> AllocationRequest:
        """Resolve missing rates through `model` and build the allocator's frozen request."""
        if self.node.contention is not None:
            curve = ContentionCurve.from_pairs(self.node.contention)
        elif model is not None:
            curve = ContentionCurve(model.contention_points())
        else:
            curve = ContentionCurve.contention_free()
        node = NodeSpec(
            cpu_workers=self.node.cpu_workers,
            contention=curve,
            decoder_capacity=self.node.decoder_capacity,
        )
        jobs = tuple(_job_spec(index, job, model) for index, job in enumerate(self.jobs))
        return AllocationRequest(node=node, jobs=jobs, fair_floor=self.fair_floor)


def _job_spec(index: int, job: JobBody, model: ThroughputModel | None) -> JobSpec:
    where = f"jobs[{index}]"
    step_time_s = job.step_time_s
    if step_time_s is None:
        if model is None or job.flops is None:
            raise InvalidRequest(
                f"{where}.step_time_s", "missing: give it, or give flops and pass --tpm MODEL.json"
            )
        step_time_s = model.predict_step_time_s(
            batch_size_per_gpu=job.batch_size / job.gpus,
            flops=job.flops,
            model_params=job.model_params,
            gpus=job.gpus,
        )
    sample_cost_s = job.sample_cost_s
    if sample_cost_s is None:
        if model is None or job.pipeline is None:
            raise InvalidRequest(
                f"{where}.sample_cost_s",
                "missing: give it, or give pipeline and pass --tpm MODEL.json",
            )
        sample_cost_s = model.predict_sample_cost_s(job.pipeline)
    return JobSpec(
        id=job.id,
        gpus=job.gpus,
        batch_size=job.batch_size,
        model_params=job.model_params,
        step_time_s=step_time_s,
        sample_cost_s=sample_cost_s,
        device_sample_cost_s=job.device_sample_cost_s,
        current_workers_per_gpu=job.current_workers_per_gpu,
        remaining_samples=job.remaining_samples,
    )


def describe_validation_error(error: ValidationError) -> str:
    """One line per problem, each naming the field as `jobs[1].sample_cost_s`."""
    lines = []
    for problem in error.errors():
        path = ""
        for part in problem["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        got = problem.get("input")
        shown = "" if isinstance(got, dict | list) else f" (got {got!r})"
        lines.append(f"{path or 'request'}: {problem['msg']}{shown}")
    return "; ".join(lines)
