"""The one small interface between the throughput model and the allocator.

The allocator plans on predicted rates (step time, sample cost, eta). Whatever predicts them
(a fitted `tpm.FittedTPM`, a simulator's truth, a test's literals) implements this protocol.
"""

from typing import Protocol


class ThroughputModel(Protocol):
    """Predicts the quantities of formulas 6 and 7 for jobs that do not state them."""

    def predict_step_time_s(
        self, *, batch_size_per_gpu: float, flops: float, model_params: float, gpus: int
    ) -> float:
        """1/mu: seconds per iteration with loading removed (formula 6)."""
        ...

    def predict_sample_cost_s(self, pipeline: str) -> float:
        """c: one contention-free worker's seconds per sample for this pipeline."""
        ...

    def contention_points(self) -> tuple[tuple[float, float], ...]:
        """eta(D) as [(D, eta)] points, the node curve of a request."""
        ...
