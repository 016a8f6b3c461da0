"""The node's contention efficiency eta(D), D being the loader processes on the whole node.

One worker alone loads 1/c samples per second; D workers together load D * eta(D) / c.
eta is 1 in the contention-free stage, falls in the contention stage, and past the last point
the node's loading capacity D * eta(D) stays flat (the saturation stage, paper Fig. 5).
"""

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from allocator.errors import InvalidRequest


@dataclass(frozen=True)
class ContentionCurve:
    """eta(D) given as points (D, eta), linear between points.

    Before the first point eta is the first point's value; past the last point the capacity
    D * eta(D) is held at its last value. No points at all means a contention-free node
    (eta = 1 at every load).
    """

    points: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        previous_d, previous_eta = 0.0, 1.0
        for index, (processes, eta) in enumerate(self.points):
            where = f"node.contention[{index}]"
            if not processes > previous_d:
                raise InvalidRequest(
                    where, f"processes must be positive and increasing (got {processes})"
                )
            if not 0.0 < eta <= 1.0:
                raise InvalidRequest(where, f"eta must be in (0, 1] (got {eta})")
            if eta > previous_eta:
                # Optimal's search over the total relies on eta never rising with more load.
                raise InvalidRequest(
                    where, f"eta must not increase with processes (got {eta} after {previous_eta})"
                )
            previous_d, previous_eta = processes, eta
        object.__setattr__(self, "_ds", tuple(d for d, _ in self.points))

    @classmethod
    def from_pairs(cls, pairs: Sequence[Sequence[float]]) -> "ContentionCurve":
        """Build from a JSON-style list of [processes, eta] pairs."""
        if not pairs:
            raise InvalidRequest(
                "node.contention",
                "needs at least one [processes, eta] point; omit it for a contention-free node",
            )
        points: list[tuple[float, float]] = []
        for index, pair in enumerate(pairs):
            if len(pair) != 2:
                raise InvalidRequest(
                    f"node.contention[{index}]", "each point is a pair [processes, eta]"
                )
            points.append((float(pair[0]), float(pair[1])))
        return cls(tuple(points))

    @classmethod
    def contention_free(cls) -> "ContentionCurve":
        """eta = 1 at every load: loading scales linearly with workers."""
        return cls(())

    def efficiency(self, processes: float) -> float:
        """eta(D) for D loader processes on the node."""
        if not self.points:
            return 1.0
        first_d, first_eta = self.points[0]
        last_d, last_eta = self.points[-1]
        if processes <= first_d:
            return first_eta
        if processes >= last_d:
            return last_eta * last_d / processes
        ds: tuple[float, ...] = self._ds  # type: ignore[attr-defined]
        right = bisect.bisect_right(ds, processes)
        (d0, e0), (d1, e1) = self.points[right - 1], self.points[right]
        return e0 + (e1 - e0) * (processes - d0) / (d1 - d0)

    def efficiencies(self, processes: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """eta(D) for many totals at once, the same values as `efficiency`."""
        totals = np.asarray(processes, dtype=np.float64)
        if not self.points:
            return np.ones_like(totals)
        ds = np.array([d for d, _ in self.points])
        etas = np.array([eta for _, eta in self.points])
        inside = np.interp(totals, ds, etas)
        saturated: npt.NDArray[np.float64] = np.where(
            totals > ds[-1], etas[-1] * ds[-1] / np.maximum(totals, 1e-300), inside
        )
        return saturated

    def capacity(self, processes: float) -> float:
        """D * eta(D): the node's loading capacity in contention-free worker equivalents."""
        return processes * self.efficiency(processes)
