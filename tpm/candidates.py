"""Step-time regressors: the linear, polynomial and nearest-neighbour rows of Table I.

Every regressor takes the raw features, a matrix with one row per sample and the columns
(batch_size, flops, model_params, gpus) = (b, f, M, n), and predicts the step time 1/mu in
seconds. Fitting goes through scikit-learn where it solves something; prediction is plain
numpy on the stored parameters, so a regressor saved to JSON and read back predicts
exactly what it predicted before.

Step times span orders of magnitude (a small CNN at b=16 against VGG at b=256) and their
noise is multiplicative, so the least-squares fits minimise relative error
(rows weighted by 1/step_time) and the neighbour model averages log step times.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tpm.arrays import FloatArray, IntArray, frozen_floats, frozen_ints
from tpm.fields import Fields

RAW_FEATURES = ("batch_size", "flops", "model_params", "gpus")


class StepTimeRegressor(Protocol):
    """A fitted regressor from raw features to step time (seconds)."""

    def predict(self, raw: FloatArray) -> FloatArray:
        """One step time per row of `raw`; may be non-positive for extrapolating fits."""
        ...

    def to_dict(self) -> dict[str, object]:
        """The parameters as JSON-ready values, enough to rebuild the regressor exactly."""
        ...


def _least_squares(*, positive: bool) -> Any:
    """scikit-learn's least squares without intercept (the constant is a column of its own).

    Imported on use: scikit-learn takes about a second to import and only fitting needs
    it, so loading a model (`stoker allocate --tpm`, `stoker tpm predict`) stays quick.
    """
    from sklearn.linear_model import LinearRegression  # noqa: PLC0415

    return LinearRegression(positive=positive, fit_intercept=False)


def formula6_features(raw: FloatArray) -> FloatArray:
    """The terms of formula 6 per row: (b*f, M*n, b*M, M, 1)."""
    batch, flops, params, gpus = raw.T
    return np.column_stack(
        [batch * flops, params * gpus, batch * params, params, np.ones_like(batch)]
    )


@dataclass(frozen=True)
class Formula6Coefficients:
    """The alphas of formula 6: 1/mu = a0*b*f + a1*M*n + a2*b*M + a3*M + a4 (seconds).

    All are non-negative: each term is a cost that can only add time.
    """

    alpha0: float  # seconds per forward FLOP of one mini-batch; covers backward (2x) too
    alpha1: float  # seconds per parameter per GPU: gradient exchange, bandwidth S folded in
    alpha2: float  # seconds per parameter per sample: aggregating per-sample gradients
    alpha3: float  # seconds per parameter: the optimizer's model update
    alpha4: float  # seconds per step independent of the job: launch and framework overhead

    def as_array(self) -> FloatArray:
        """(alpha0, ..., alpha4) in formula order."""
        return np.array(
            [self.alpha0, self.alpha1, self.alpha2, self.alpha3, self.alpha4], dtype=np.float64
        )

    def predict(self, raw: FloatArray) -> FloatArray:
        """Formula 6's step time for each row of `raw`."""
        result: FloatArray = formula6_features(raw) @ self.as_array()
        return result

    def to_dict(self) -> dict[str, object]:
        """The five alphas by name."""
        return {f"alpha{i}": float(v) for i, v in enumerate(self.as_array())}

    @classmethod
    def from_fields(cls, fields: Fields) -> Formula6Coefficients:
        """Rebuild from `to_dict` output."""
        return cls(*(fields.number(f"alpha{i}") for i in range(5)))


def fit_linear(raw: FloatArray, step_time: FloatArray, seed: int) -> Formula6Coefficients:
    """Non-negative least squares of formula 6 on relative error.

    `seed` is unused (the fit is deterministic); it is accepted so all candidates share
    one signature.
    """
    del seed
    terms = formula6_features(raw)
    # The terms differ by ~12 orders of magnitude; scaling each column to at most 1 keeps
    # the solver well conditioned, and the scale is divided back out below.
    scale = np.max(np.abs(terms), axis=0)
    scale[scale == 0.0] = 1.0
    rows = terms / scale / step_time[:, None]
    solver = _least_squares(positive=True)
    solver.fit(rows, np.ones_like(step_time))
    alphas = np.asarray(solver.coef_, dtype=np.float64) / scale
    return Formula6Coefficients(*(float(a) for a in alphas))


def _quadratic_powers(width: int) -> tuple[tuple[int, ...], ...]:
    """Exponents of every monomial of degree <= 2 in `width` variables, constant first."""
    powers: list[tuple[int, ...]] = [(0,) * width]
    for i in range(width):
        powers.append(tuple(1 if j == i else 0 for j in range(width)))
    for i, j in itertools.combinations_with_replacement(range(width), 2):
        powers.append(tuple((j == k) + (i == k) for k in range(width)))
    return tuple(powers)


@dataclass(frozen=True, eq=False)
class PolynomialStepTime:
    """Degree-2 polynomial in the standardized raw features (b, f, M, n).

    Formula 6 is itself a degree-2 polynomial in (b, f, M, n), so this family contains it
    and adds the cross terms the paper dropped; it is plain weighted least squares (no
    ridge): 15 terms are few next to the samples we require.
    """

    mean: FloatArray
    scale: FloatArray
    powers: IntArray
    coefficients: FloatArray

    def _expand(self, raw: FloatArray) -> FloatArray:
        standard = (raw - self.mean) / self.scale
        expanded: FloatArray = np.prod(standard[:, None, :] ** self.powers[None, :, :], axis=2)
        return expanded

    def predict(self, raw: FloatArray) -> FloatArray:
        """The polynomial at each row of `raw`."""
        result: FloatArray = self._expand(raw) @ self.coefficients
        return result

    def to_dict(self) -> dict[str, object]:
        """Standardization, monomial exponents and their coefficients."""
        return {
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "powers": self.powers.tolist(),
            "coefficients": self.coefficients.tolist(),
        }

    @classmethod
    def from_fields(cls, fields: Fields) -> PolynomialStepTime:
        """Rebuild from `to_dict` output."""
        width = len(RAW_FEATURES)
        powers = fields.matrix("powers", width)
        if not all(float(p).is_integer() and p >= 0 for row in powers for p in row):
            raise fields.invalid("powers", "lists of non-negative integer exponents")
        coefficients = fields.numbers("coefficients")
        if len(coefficients) != len(powers):
            raise fields.invalid("coefficients", f"one number per monomial ({len(powers)})")
        return cls(
            mean=frozen_floats(fields.vector("mean", width)),
            scale=frozen_floats(fields.vector("scale", width)),
            powers=frozen_ints(powers).reshape(-1, width),
            coefficients=frozen_floats(coefficients),
        )


POLYNOMIAL_TERMS = len(_quadratic_powers(len(RAW_FEATURES)))


def fit_polynomial(raw: FloatArray, step_time: FloatArray, seed: int) -> PolynomialStepTime:
    """Weighted least squares of the degree-2 polynomial on relative error.

    `seed` is unused (the fit is deterministic).
    """
    del seed
    mean = raw.mean(axis=0)
    scale = raw.std(axis=0)
    # A feature that never varies (say every sample on one GPU) carries no information;
    # a unit scale keeps it finite and least squares gives it no weight of its own.
    scale[scale == 0.0] = 1.0
    shell = PolynomialStepTime(
        mean=frozen_floats(mean),
        scale=frozen_floats(scale),
        powers=frozen_ints(_quadratic_powers(raw.shape[1])),
        coefficients=frozen_floats(np.zeros(POLYNOMIAL_TERMS)),
    )
    rows = shell._expand(raw) / step_time[:, None]
    solver = _least_squares(positive=False)
    solver.fit(rows, np.ones_like(step_time))
    return PolynomialStepTime(
        mean=shell.mean,
        scale=shell.scale,
        powers=shell.powers,
        coefficients=frozen_floats(solver.coef_),
    )


NEIGHBOURS = 5


@dataclass(frozen=True, eq=False)
class NeighboursStepTime:
    """k-nearest neighbours in standardized log features; predicts the geometric mean.

    Log features because b, f and M each span orders of magnitude and a neighbour should
    be near in ratio, not in absolute FLOPs.
    """

    neighbours: int
    center: FloatArray
    scale: FloatArray
    points: FloatArray = field(repr=False)
    log_step_time: FloatArray = field(repr=False)

    def predict(self, raw: FloatArray) -> FloatArray:
        """Mean log step time of the `neighbours` nearest stored samples, exponentiated."""
        queries = (np.log(raw) - self.center) / self.scale
        result = np.empty(queries.shape[0], dtype=np.float64)
        # Blocks bound the distance matrix's memory for large prediction files.
        block = 512
        for start in range(0, queries.shape[0], block):
            chunk = queries[start : start + block]
            distance = np.zeros((chunk.shape[0], self.points.shape[0]))
            for column in range(chunk.shape[1]):
                distance += (chunk[:, column, None] - self.points[None, :, column]) ** 2
            # A stable sort breaks ties by sample order, so predictions are reproducible.
            nearest = np.argsort(distance, axis=1, kind="stable")[:, : self.neighbours]
            result[start : start + block] = np.exp(self.log_step_time[nearest].mean(axis=1))
        return result

    def to_dict(self) -> dict[str, object]:
        """k, the standardization and every stored sample."""
        return {
            "neighbours": self.neighbours,
            "center": self.center.tolist(),
            "scale": self.scale.tolist(),
            "points": self.points.tolist(),
            "log_step_time": self.log_step_time.tolist(),
        }

    @classmethod
    def from_fields(cls, fields: Fields) -> NeighboursStepTime:
        """Rebuild from `to_dict` output."""
        width = len(RAW_FEATURES)
        points = fields.matrix("points", width)
        log_step_time = fields.numbers("log_step_time")
        if len(log_step_time) != len(points):
            raise fields.invalid("log_step_time", f"one number per point ({len(points)})")
        neighbours = fields.integer("neighbours")
        if not 1 <= neighbours <= len(points):
            raise fields.invalid("neighbours", f"between 1 and the {len(points)} points")
        return cls(
            neighbours=neighbours,
            center=frozen_floats(fields.vector("center", width)),
            scale=frozen_floats(fields.vector("scale", width)),
            points=frozen_floats(points).reshape(-1, width),
            log_step_time=frozen_floats(log_step_time),
        )


def fit_neighbours(raw: FloatArray, step_time: FloatArray, seed: int) -> NeighboursStepTime:
    """Store the samples in standardized log space; `seed` is unused."""
    del seed
    logs = np.log(raw)
    center = logs.mean(axis=0)
    scale = logs.std(axis=0)
    scale[scale == 0.0] = 1.0
    return NeighboursStepTime(
        neighbours=NEIGHBOURS,
        center=frozen_floats(center),
        scale=frozen_floats(scale),
        points=frozen_floats((logs - center) / scale),
        log_step_time=frozen_floats(np.log(step_time)),
    )
