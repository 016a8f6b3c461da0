"""A stored job's submitted settings as one typed object, and the one conversion from them
to the scheduler core's `JobRequest`.

The store keeps the submitted body as JSON (`JobRecord.spec`, what the REST layer shows);
everything else reads it through `JobSettings`, converted once.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from allocator.curvefit import profile_prior
from allocator.types import DecodeMode
from scheduler.messages import JobRequest
from tpm.zoo import model_features

Resize = Literal["hot", "cold"]
# A command that gives no hints is planned as a ResNet-18-sized model (the zoo's); its own
# telemetry tells the rest (issue 16).
DEFAULT_HINTS = model_features("Resnet18")


@dataclass(frozen=True)
class JobSettings:
    """What the user asked for: the fields of `POST /v1/jobs`."""

    model: str | None  # a zoo job's model; None for a command
    batch_size: int  # global batch B
    gpus: int
    iterations: int | None  # None: a command that did not say
    command: tuple[str, ...] | None = None  # one rank's argv
    workdir: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    checkpoint_every_s: float | None = None
    model_params: float | None = None  # hints for the throughput model
    flops: float | None = None
    knee_sharpness: float | None = None  # p of its knee, as profiled
    # Its measured curve, as profiled: (workers per GPU, samples/s per GPU) points.
    profile: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    dataset: str | None = None
    decode_mode: DecodeMode = "cpu"
    gpu_indices: tuple[int, ...] | None = None
    max_restarts: int | None = None  # None: the daemon's default
    resize: Resize = "hot"
    audit_samples: bool = False
    continue_from: str | None = None  # an ended job whose newest checkpoint it starts from
    heartbeat_timeout_s: float | None = None  # None: the daemon's
    stall_timeout_s: float | None = None  # None: the daemon's
    time_limit_s: float | None = None  # None: no limit

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> "JobSettings":
        """From the stored JSON body (older rows may lack the newer optional keys)."""
        pinned = spec.get("gpu_indices")
        command = spec.get("command")
        return cls(
            model=spec.get("model"),
            batch_size=int(spec["batch_size"]),
            gpus=int(spec["gpus"]),
            iterations=int(spec["iterations"]) if spec.get("iterations") is not None else None,
            command=tuple(str(arg) for arg in command) if command is not None else None,
            workdir=spec.get("workdir"),
            env=tuple(sorted((str(k), str(v)) for k, v in (spec.get("env") or {}).items())),
            checkpoint_every_s=spec.get("checkpoint_every_s"),
            model_params=spec.get("model_params"),
            flops=spec.get("flops"),
            knee_sharpness=spec.get("knee_sharpness"),
            profile=_points(spec.get("profile")),
            dataset=spec.get("dataset"),
            decode_mode=spec.get("decode_mode", "cpu"),
            gpu_indices=tuple(int(index) for index in pinned) if pinned is not None else None,
            max_restarts=spec.get("max_restarts"),
            resize=spec.get("resize", "hot"),
            audit_samples=bool(spec.get("audit_samples", False)),
            continue_from=spec.get("continue_from"),
            heartbeat_timeout_s=spec.get("heartbeat_timeout_s"),
            stall_timeout_s=spec.get("stall_timeout_s"),
            time_limit_s=spec.get("time_limit_s"),
        )

    @property
    def is_command(self) -> bool:
        return self.command is not None

    def request(
        self, job_id: str, *, default_max_restarts: int, restarts: int, image_size: int = 224
    ) -> JobRequest:
        """The job as the core plans it: its hints, or the zoo's features for its model on
        `image_size`-pixel images (UnknownModel names the field), its restart budget, and
        the restarts it has used."""
        features = (
            model_features(self.model, image_size) if self.model is not None else DEFAULT_HINTS
        )
        step_time_s = sample_cost_s = None
        sharpness = self.knee_sharpness
        if self.profile is not None:  # the prior's rates and knee are its fit's
            prior = profile_prior(
                *self.profile,
                batch_size=self.batch_size,
                gpus=self.gpus,
                knee_sharpness=sharpness,
            )
            step_time_s, sample_cost_s = prior.step_time_s, prior.sample_cost_s
            sharpness = prior.knee_sharpness
        return JobRequest(
            id=job_id,
            gpus=self.gpus,
            batch_size=self.batch_size,
            iterations=self.iterations,
            model_params=self.model_params or features.model_params,
            flops=self.flops or features.flops,
            step_time_s=step_time_s,
            sample_cost_s=sample_cost_s,
            knee_sharpness=sharpness,
            max_restarts=default_max_restarts if self.max_restarts is None else self.max_restarts,
            restarts=restarts,
            gpu_indices=self.gpu_indices,
            command=self.command is not None,
            heartbeat_timeout_s=self.heartbeat_timeout_s,
            stall_timeout_s=self.stall_timeout_s,
            time_limit_s=self.time_limit_s,
        )


def _points(
    profile: Mapping[str, Any] | None,
) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """A stored profile's points (the body's `profile`), None where it gave none."""
    if profile is None:
        return None
    return tuple(profile["workers_per_gpu"]), tuple(profile["samples_per_s"])
