"""A stored job's submitted settings as one typed object, and the one conversion from them
to the scheduler core's `JobRequest`.

The store keeps the submitted body as JSON (`JobRecord.spec`, what the REST layer shows);
everything else reads it through `JobSettings`, converted once.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from allocator.types import DecodeMode
from scheduler.messages import JobRequest
from tpm.zoo import model_features

Resize = Literal["hot", "cold"]


@dataclass(frozen=True)
class JobSettings:
    """What the user asked for: the fields of `POST /v1/jobs`."""

    model: str
    batch_size: int  # global batch B
    gpus: int
    iterations: int
    dataset: str | None = None
    decode_mode: DecodeMode = "cpu"
    gpu_indices: tuple[int, ...] | None = None
    max_restarts: int | None = None  # None: the daemon's default
    resize: Resize = "hot"
    audit_samples: bool = False

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> "JobSettings":
        """From the stored JSON body (older rows may lack the newer optional keys)."""
        pinned = spec.get("gpu_indices")
        return cls(
            model=str(spec["model"]),
            batch_size=int(spec["batch_size"]),
            gpus=int(spec["gpus"]),
            iterations=int(spec["iterations"]),
            dataset=spec.get("dataset"),
            decode_mode=spec.get("decode_mode", "cpu"),
            gpu_indices=tuple(int(index) for index in pinned) if pinned is not None else None,
            max_restarts=spec.get("max_restarts"),
            resize=spec.get("resize", "hot"),
            audit_samples=bool(spec.get("audit_samples", False)),
        )

    def request(self, job_id: str, *, default_max_restarts: int, restarts: int) -> JobRequest:
        """The job as the core plans it: the zoo's features for its model (UnknownModel
        names the field), its restart budget, and the restarts it has used."""
        features = model_features(self.model)
        return JobRequest(
            id=job_id,
            gpus=self.gpus,
            batch_size=self.batch_size,
            iterations=self.iterations,
            model_params=features.model_params,
            flops=features.flops,
            max_restarts=default_max_restarts if self.max_restarts is None else self.max_restarts,
            restarts=restarts,
            gpu_indices=self.gpu_indices,
        )
