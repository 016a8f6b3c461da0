"""The training-rate model: formula 6 candidates, chosen by held-out R^2.

`fit_training` validates every candidate of Table I (linear with non-negative alphas,
degree-2 polynomial, k-nearest neighbours, random forest) on held-out samples (see
`tpm.validation` for the split rule), picks the highest R^2 of step time, and refits it
on all samples. Candidates that need more samples than a validation fit has are
skipped and reported with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tpm.arrays import FloatArray, IndexArray
from tpm.candidates import (
    NEIGHBOURS,
    POLYNOMIAL_TERMS,
    Formula6Coefficients,
    NeighboursStepTime,
    PolynomialStepTime,
    StepTimeRegressor,
    fit_linear,
    fit_neighbours,
    fit_polynomial,
)
from tpm.errors import SampleError, TpmError
from tpm.fields import Fields
from tpm.forest import MIN_SAMPLES_LEAF, ForestStepTime, fit_forest
from tpm.samples import TRAINING_TARGET, TrainingSamples
from tpm.validation import (
    ValidationPlan,
    held_out_predictions,
    plan_validation,
    r_squared,
)

logger = logging.getLogger(__name__)

# Predictions are clipped to at least this many seconds. An extrapolating polynomial can
# go to zero or below, and a non-positive step time would read as an infinite training
# rate and let one job swallow every loader worker; no real step is under a microsecond.
STEP_TIME_FLOOR_S = 1e-6

# Fewest samples `fit_training` accepts: the five alphas plus a few to spare.
MIN_TRAINING_SAMPLES = 8


@dataclass(frozen=True)
class Candidate:
    """A regressor family: how to fit it, how to read it back, how much data it needs."""

    name: str
    min_fit_samples: int  # fewest samples one fit needs to be meaningful
    fit: Callable[[FloatArray, FloatArray, int], StepTimeRegressor]
    load: Callable[[Fields], StepTimeRegressor]


CANDIDATES: tuple[Candidate, ...] = (
    Candidate("linear", 5, fit_linear, Formula6Coefficients.from_fields),
    # More samples than monomials, or least squares interpolates the noise.
    Candidate("polynomial", POLYNOMIAL_TERMS + 1, fit_polynomial, PolynomialStepTime.from_fields),
    # More samples than neighbours, or every prediction is the same global mean.
    Candidate("knn", NEIGHBOURS + 1, fit_neighbours, NeighboursStepTime.from_fields),
    Candidate("random_forest", 4 * MIN_SAMPLES_LEAF, fit_forest, ForestStepTime.from_fields),
)
CANDIDATE_NAMES = tuple(candidate.name for candidate in CANDIDATES)


def raw_features(samples: TrainingSamples) -> FloatArray:
    """One row per sample: (batch_size, flops, model_params, gpus)."""
    return np.column_stack([samples.batch_size, samples.flops, samples.model_params, samples.gpus])


@dataclass(frozen=True)
class TrainingModel:
    """The chosen candidate, fitted on all samples."""

    candidate: str
    regressor: StepTimeRegressor

    def predict(self, raw: FloatArray) -> FloatArray:
        """Step time in seconds per row of raw features, at least `STEP_TIME_FLOOR_S`."""
        return np.maximum(self.regressor.predict(raw), STEP_TIME_FLOOR_S)

    def to_dict(self) -> dict[str, object]:
        """The candidate's name and parameters."""
        return {"candidate": self.candidate, "params": self.regressor.to_dict()}

    @classmethod
    def from_fields(cls, fields: Fields) -> TrainingModel:
        """Rebuild from `to_dict` output."""
        name = fields.text("candidate")
        if name not in CANDIDATE_NAMES:
            raise fields.invalid("candidate", f"one of {', '.join(CANDIDATE_NAMES)}")
        candidate = CANDIDATES[CANDIDATE_NAMES.index(name)]
        return cls(candidate=name, regressor=candidate.load(fields.child("params")))


@dataclass(frozen=True)
class TrainingFit:
    """A fitted training model, formula 6's alphas on all samples, and the report."""

    model: TrainingModel
    alphas: Formula6Coefficients
    report: dict[str, object]


def fit_training(
    samples: TrainingSamples, *, seed: int = 0, candidates: Sequence[str] | None = None
) -> TrainingFit:
    """Validate the candidates, choose the best by held-out R^2 and refit it on all samples.

    `candidates` restricts the choice to those names (all by default); `seed` fixes the
    validation shuffle and the forest. Raises SampleError when the samples lack step
    times or are fewer than `MIN_TRAINING_SAMPLES`.
    """
    names = CANDIDATE_NAMES if candidates is None else tuple(candidates)
    unknown = [name for name in names if name not in CANDIDATE_NAMES]
    if unknown or not names:
        raise TpmError(
            f"unknown training candidates {unknown}; choose from {', '.join(CANDIDATE_NAMES)}"
        )
    step_time = _targets(samples)
    raw = raw_features(samples)
    plan = plan_validation(len(samples), seed)
    scores: dict[str, dict[str, object]] = {}
    best: tuple[float, Candidate] | None = None
    for candidate in (c for c in CANDIDATES if c.name in names):
        r2, skipped = _validate(candidate, raw, step_time, plan, seed)
        scores[candidate.name] = {"r2": r2, "skipped": skipped}
        if r2 is not None and (best is None or r2 > best[0]):
            best = (r2, candidate)
    # With no score to go on, formula 6 itself is the paper's model and the safest bet.
    chosen = best[1] if best is not None else CANDIDATES[0]
    regressor = chosen.fit(raw, step_time, seed)
    alphas = (
        regressor
        if isinstance(regressor, Formula6Coefficients)
        else fit_linear(raw, step_time, seed)
    )
    logger.info("training model: chose %s among %s", chosen.name, scores)
    report: dict[str, object] = {
        "candidates": scores,
        "chosen": chosen.name,
        "validation": plan.name,
        "samples": len(samples),
        "alphas": alphas.to_dict(),
    }
    return TrainingFit(
        model=TrainingModel(candidate=chosen.name, regressor=regressor),
        alphas=alphas,
        report=report,
    )


def _targets(samples: TrainingSamples) -> FloatArray:
    if samples.step_time_s is None:
        raise SampleError(
            samples.source,
            "no measured step times; fitting needs the target column",
            column=TRAINING_TARGET,
        )
    if len(samples) < MIN_TRAINING_SAMPLES:
        raise SampleError(
            samples.source,
            f"{len(samples)} training samples, but fitting needs at least "
            f"{MIN_TRAINING_SAMPLES}; add rows",
        )
    return samples.step_time_s


def _validate(
    candidate: Candidate,
    raw: FloatArray,
    step_time: FloatArray,
    plan: ValidationPlan,
    seed: int,
) -> tuple[float | None, str | None]:
    """(held-out R^2, None) or (None, why it has no score)."""
    smallest_fit = plan.smallest_train()
    if smallest_fit < candidate.min_fit_samples:
        return None, (
            f"needs {candidate.min_fit_samples} samples per fit, but validation fits on "
            f"{smallest_fit}; add samples"
        )

    def fit_predict(train: IndexArray, test: IndexArray) -> FloatArray:
        model = TrainingModel(candidate.name, candidate.fit(raw[train], step_time[train], seed))
        return model.predict(raw[test])

    held_out, predicted = held_out_predictions(plan, fit_predict)
    r2 = r_squared(step_time[held_out], predicted)
    if r2 is None:
        return None, "held-out step times do not vary, so R^2 is undefined"
    return r2, None
