"""What the planner is fed at the edges: profiled throughput-model samples
(`SampleUpload`, POST /v1/tpm/samples) and the allocation request `stoker allocate` reads
(`AllocationRequestBody`: a node and its jobs, by their rates or the features a TPM predicts
them from), turned into the allocator's frozen request.
"""

import dataclasses
from dataclasses import replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from allocator import AllocationRequest, ContentionCurve, JobSpec, NodeSpec, ThroughputModel
from allocator.bounds import MAX_KNEE_SHARPNESS, MIN_KNEE_SHARPNESS
from allocator.curvefit import MAX_POINTS, curve_problem, profile_prior
from scheduler.rates import job_spec


class SampleUpload(BaseModel):
    """TPM samples as CSV text with a header, the columns `stoker tpm fit` reads."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["training", "loading"]
    csv: str = Field(min_length=1, max_length=1_000_000)
    source: str = Field("upload", max_length=200)


class NodeBody(BaseModel):
    """The node: loader processes C, decoder capacity K (samples/s), contention eta(D)."""

    model_config = ConfigDict(extra="forbid")

    cpu_workers: int = Field(ge=1, description="loader processes the node allows (C)")
    decoder_capacity: float = Field(0.0, ge=0.0, description="decoder samples/s; 0 = none")
    contention: list[tuple[float, float]] | None = Field(
        None, description="eta(D) as [processes, eta] points; omitted = from --tpm or none"
    )
    cpu_cores: float | None = Field(
        None,
        gt=0.0,
        allow_inf_nan=False,
        description=(
            "on a node without GPUs, the CPUs training and loading share: `lookahead`"
            " predicts on one budget of them once every job gives cpu_cost_s and core_share"
        ),
    )


class ProfileBody(BaseModel):
    """A job's measured curve: samples/s per GPU at a few loader workers per GPU, the job
    alone (`stoker profile`, or a published profile); the planner fits its knee to it."""

    model_config = ConfigDict(extra="forbid")

    workers_per_gpu: list[float] = Field(min_length=2, max_length=MAX_POINTS)
    samples_per_s: list[float] = Field(
        min_length=2, max_length=MAX_POINTS, description="per GPU, at each worker count"
    )

    @model_validator(mode="after")
    def _consistent(self) -> "ProfileBody":
        problem = curve_problem(self.workers_per_gpu, self.samples_per_s)
        if problem is not None:
            raise ValueError(problem)
        return self


class JobBody(BaseModel):
    """One job: its predicted rates, its measured curve, or the features a TPM predicts its
    rates from."""

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
    cpu_cost_s: float | None = Field(
        None,
        gt=0.0,
        allow_inf_nan=False,
        description="CPU seconds per sample, training and loading together (a CPU node)",
    )
    core_share: float | None = Field(
        None, gt=0.0, le=1.0, description="the share of a core its loader workers get now"
    )
    overhead_s: float = Field(
        0.0,
        ge=0.0,
        allow_inf_nan=False,
        description="seconds per sample it waits that no worker shortens",
    )
    knee_sharpness: float | None = Field(
        None,
        ge=MIN_KNEE_SHARPNESS,
        le=MAX_KNEE_SHARPNESS,
        allow_inf_nan=False,
        description=(
            "p of its smooth knee (G^-p + L^-p)^(-1/p), as learned from its heartbeats or"
            " profiled; omitted = the policy's default"
        ),
    )
    profile: ProfileBody | None = Field(
        None,
        description=(
            "its measured curve: the planner's step time, sample cost and knee from its fit"
            " (knee_sharpness, if given, stands)"
        ),
    )

    @model_validator(mode="after")
    def _one_source(self) -> "JobBody":
        if self.profile is not None and (self.step_time_s or self.sample_cost_s):
            raise ValueError(
                "give a profile or step_time_s and sample_cost_s, not both: the profile's fit"
                " sets them"
            )
        return self

    def with_profile_fitted(self) -> "JobBody":
        """The job with the rates and knee its profile's fit says, where it has one."""
        if self.profile is None:
            return self
        prior = profile_prior(
            self.profile.workers_per_gpu,
            self.profile.samples_per_s,
            batch_size=self.batch_size,
            gpus=self.gpus,
            knee_sharpness=self.knee_sharpness,
        )
        return self.model_copy(update=dataclasses.asdict(prior))


class AllocationRequestBody(BaseModel):
    """What `stoker allocate` reads."""

    model_config = ConfigDict(extra="forbid")

    node: NodeBody
    jobs: list[JobBody]
    fair_floor: float = Field(0.8, ge=0.0, le=1.0)
    regrow_delay_s: float = Field(
        0.0,
        ge=0.0,
        allow_inf_nan=False,
        description="seconds from a finish to the plan after it (the daemon's completion window)",
    )

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
            cpu_cores=self.node.cpu_cores,
        )
        fitted = [job.with_profile_fitted() for job in self.jobs]
        jobs = tuple(_job_spec(index, job, model) for index, job in enumerate(fitted))
        return AllocationRequest(
            node=node, jobs=jobs, fair_floor=self.fair_floor, regrow_delay_s=self.regrow_delay_s
        )


def _job_spec(index: int, job: JobBody, model: ThroughputModel | None) -> JobSpec:
    spec = job_spec(
        job,
        model,
        where=f"jobs[{index}]",
        no_model="give flops and pipeline and pass --tpm MODEL.json",
    )
    return replace(
        spec,
        current_workers_per_gpu=job.current_workers_per_gpu,
        remaining_samples=job.remaining_samples,
        cpu_cost_s=job.cpu_cost_s,
        core_share=job.core_share,
        overhead_s=job.overhead_s,
        knee_sharpness=job.knee_sharpness,
    )
