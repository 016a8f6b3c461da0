"""The node's contention curve: loading capacity and efficiency eta(D) against workers D.

Capacity K(D), in worker-equivalents, is piecewise linear (paper Fig. 5): slope 1 up to
the first knee k1 (contention-free, eta = 1), slope s2 in [0, 1] up to the second knee k2
(contention), flat after it (saturation). eta(D) = K(D) / D. Either knee may be absent
when the samples show no such stage.

Past the largest worker count in the samples the capacity is held flat, whatever the
stage: nothing was measured there, and promising throughput nobody observed would lead
the allocator to spawn workers that may buy nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tpm.errors import ModelFormatError
from tpm.fields import Fields


@dataclass(frozen=True)
class ContentionFit:
    """Fitted stage boundaries and slope of the node's loading capacity."""

    contention_from: float | None  # k1: workers up to which eta = 1; None: no knee seen
    saturation_from: float | None  # k2: workers from which capacity is flat; None: not seen
    contention_slope: float  # s2: capacity gained per worker between k1 and k2
    observed_max_workers: float  # largest D in the samples; capacity is flat past it

    def __post_init__(self) -> None:
        k1, k2 = self.contention_from, self.saturation_from
        problems = []
        if not (math.isfinite(self.observed_max_workers) and self.observed_max_workers >= 1):
            problems.append("observed_max_workers must be at least 1")
        if not 0.0 <= self.contention_slope <= 1.0:
            problems.append("contention_slope must lie in [0, 1]")
        if k1 is not None and not 1.0 <= k1 <= self.observed_max_workers:
            problems.append("contention_from must lie between 1 and observed_max_workers")
        if k2 is not None and (k1 is None or not k1 < k2 <= self.observed_max_workers):
            problems.append("saturation_from needs contention_from below it")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def _end(self) -> float:
        """Workers from which the capacity stays flat."""
        if self.saturation_from is None:
            return self.observed_max_workers
        return min(self.saturation_from, self.observed_max_workers)

    @property
    def stages(self) -> int:
        """How many stages the curve has (1 to 3)."""
        return 1 + (self.contention_from is not None) + (self.saturation_from is not None)

    def capacity(self, workers: float) -> float:
        """K(D): the node's loading capacity in worker-equivalents at `workers` processes."""
        clipped = min(workers, self._end)
        if self.contention_from is None:
            return clipped
        knee = self.contention_from
        return min(clipped, knee) + self.contention_slope * max(clipped - knee, 0.0)

    def efficiency(self, workers: float) -> float:
        """eta(D) = K(D) / D in (0, 1]; 1 for D at or below one worker."""
        if workers <= 1.0:
            return 1.0
        # K(D) <= D in exact arithmetic; rounding in k1 + s2 * (D - k1) can overshoot by an ulp.
        return min(1.0, self.capacity(workers) / workers)

    def stage_slopes(self) -> list[float]:
        """Capacity slope of each stage, in order."""
        slopes = [1.0]
        if self.contention_from is not None:
            slopes.append(self.contention_slope)
        if self.saturation_from is not None:
            slopes.append(0.0)
        return slopes

    def points(self) -> tuple[tuple[float, float], ...]:
        """(D, eta) points for the allocator, increasing in D.

        eta read linearly between consecutive points equals `efficiency` at every whole
        D (the only worker counts that exist), and past the last point the capacity stays
        flat: eta(D) = eta_last * D_last / D. Inside the contention stage eta = s2 +
        (1 - s2) * k1 / D is not linear in D, hence one point per whole worker count there.
        """
        end = self._end
        knee = self.contention_from if self.contention_from is not None else end
        workers = [1.0, knee]
        workers.extend(float(d) for d in range(math.floor(knee) + 1, math.ceil(end)))
        workers.append(end)
        points: list[tuple[float, float]] = []
        for d in sorted({d for d in workers if d >= 1.0}):
            # Rounding must not let eta tick up: the allocator relies on it never rising.
            eta = min(self.efficiency(d), points[-1][1]) if points else self.efficiency(d)
            points.append((d, eta))
        return tuple(points)

    def to_dict(self) -> dict[str, object]:
        """The curve's parameters by name (knees are null where absent)."""
        return {
            "contention_from": self.contention_from,
            "saturation_from": self.saturation_from,
            "contention_slope": self.contention_slope,
            "observed_max_workers": self.observed_max_workers,
        }

    @classmethod
    def from_fields(cls, fields: Fields) -> ContentionFit:
        """Rebuild from `to_dict` output; raises ModelFormatError if inconsistent."""
        try:
            return cls(
                contention_from=fields.optional_number("contention_from"),
                saturation_from=fields.optional_number("saturation_from"),
                contention_slope=fields.number("contention_slope"),
                observed_max_workers=fields.number("observed_max_workers"),
            )
        except ValueError as error:
            if isinstance(error, ModelFormatError):
                raise
            raise ModelFormatError(fields.source, f"field {fields.path}: {error}") from None
