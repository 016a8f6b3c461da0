"""Builders for scheduler-core tests: literal jobs, a node, command filters, and throughput
models of one answer."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from allocator import ContentionCurve, NodeSpec
from scheduler.config import SchedulerConfig
from scheduler.messages import Command, JobRequest
from scheduler.rates import RateModel
from scheduler.scheduler import Scheduler
from tpm.errors import UnknownPipeline

C = TypeVar("C")


def job(
    job_id: str,
    *,
    gpus: int = 1,
    batch_size: int = 100,
    iterations: int | None = 10_000,
    step_time_s: float = 0.1,
    sample_cost_s: float = 0.01,
) -> JobRequest:
    """A job that states its rates, so no throughput model is needed. Alone on a
    contention-free node it keeps up with batch * cost / step workers per GPU (10 here)."""
    return JobRequest(
        id=job_id,
        gpus=gpus,
        batch_size=batch_size,
        iterations=iterations,
        model_params=11.7e6,
        step_time_s=step_time_s,
        sample_cost_s=sample_cost_s,
    )


def scheduler(
    *,
    cpu_workers: int = 12,
    policy: str = "waa",
    window_s: float = 0.0,
    completion_window_s: float | None = None,
    gate: bool = False,
    pause_timeout_s: float = 60.0,
    default_pause_cost_s: float = 16.0,
    restart_backoff_s: float = 0.0,
    heartbeat_timeout_s: float = 10.0,
    stall_timeout_s: float = 3600.0,
    stall_action: str = "warn",
    start_when_free: bool = False,
    plans_inline: bool = True,
) -> Scheduler:
    """A core on a contention-free node with `cpu_workers` loader processes. Arrivals wait
    for their window unless `start_when_free` (the windows' own tests are written so).
    `plans_inline` False: the test makes each plan the core asks for (scheduler/planning.py)."""
    return Scheduler(
        NodeSpec(cpu_workers=cpu_workers, contention=ContentionCurve.contention_free()),
        RateModel(),
        SchedulerConfig(
            policy=policy,
            arrival_window_s=window_s,
            completion_window_s=window_s if completion_window_s is None else completion_window_s,
            gate=gate,
            pause_timeout_s=pause_timeout_s,
            default_pause_cost_s=default_pause_cost_s,
            restart_backoff_s=restart_backoff_s,
            restart_backoff_max_s=max(restart_backoff_s, 300.0),
            heartbeat_timeout_s=heartbeat_timeout_s,
            stall_timeout_s=stall_timeout_s,
            stall_action=stall_action,
            start_when_free=start_when_free,
        ),
        plans_inline=plans_inline,
    )


def only(commands: Sequence[Command], kind: type[C]) -> list[C]:
    """The commands of one type, in order."""
    return [command for command in commands if isinstance(command, kind)]


@dataclass(frozen=True)
class FlatModel:
    """A throughput model that predicts one step time for every job and no contention."""

    step_time_s: float
    sample_cost_s: float = 0.01

    def predict_step_time_s(
        self, *, batch_size_per_gpu: float, flops: float, model_params: float, gpus: int
    ) -> float:
        return self.step_time_s

    def predict_sample_cost_s(self, pipeline: str) -> float:
        return self.sample_cost_s

    def contention_points(self) -> tuple[tuple[float, float], ...]:
        return ((1.0, 1.0), (64.0, 1.0))


class NoPipelineModel:
    """A fit that knows no pipeline: it cannot predict any job's loading."""

    def predict_step_time_s(self, **_: float) -> float:
        return 0.1

    def predict_sample_cost_s(self, pipeline: str) -> float:
        raise UnknownPipeline(pipeline, ())

    def contention_points(self) -> tuple[tuple[float, float], ...]:
        return ()
