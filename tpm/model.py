"""The fitted throughput prediction model, its fit, and its JSON form.

`FittedTPM` is what the allocator consumes: step time (1/mu, formula 6), each pipeline's
sample cost c and the node's contention curve eta(D) (formula 7 with contention). It
saves to versioned JSON text (no pickle) and reads back predicting exactly the same.
"""

from __future__ import annotations

import importlib
import json
import math
from dataclasses import dataclass

import numpy as np

from tpm.arrays import FloatArray
from tpm.errors import ModelFormatError, QueryError
from tpm.fields import Fields
from tpm.loading import LoadingModel, fit_loading
from tpm.samples import LoadingSamples, TrainingSamples
from tpm.training import TrainingModel, fit_training, raw_features

FORMAT = "stoker-tpm"
VERSION = 1


@dataclass(frozen=True)
class FittedTPM:
    """Predicts step time, per-pipeline sample cost and contention for the allocator."""

    training: TrainingModel
    loading: LoadingModel

    def predict_step_time_s(
        self, *, batch_size_per_gpu: float, flops: float, model_params: float, gpus: int
    ) -> float:
        """1/mu in seconds for one job; positive. Raises QueryError on bad arguments."""
        for name, value in (
            ("batch_size_per_gpu", batch_size_per_gpu),
            ("flops", flops),
            ("model_params", model_params),
        ):
            if isinstance(value, bool) or not (math.isfinite(value) and value > 0):
                raise QueryError(f"{name} must be a positive finite number, got {value!r}")
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
            raise QueryError(f"gpus must be a positive integer, got {gpus!r}")
        raw = np.array([[batch_size_per_gpu, flops, model_params, gpus]], dtype=np.float64)
        return float(self.training.predict(raw)[0])

    def predict_sample_cost_s(self, pipeline: str) -> float:
        """c: seconds one contention-free worker spends per sample of `pipeline`.

        Raises UnknownPipeline naming the pipelines the model knows.
        """
        return self.loading.cost(pipeline)

    def contention_points(self) -> tuple[tuple[float, float], ...]:
        """eta(D) as (D, eta) points: linear between points, capacity flat past the last.

        eta is in (0, 1] and non-increasing in D; see `ContentionFit.points`.
        """
        return self.loading.curve.points()

    def efficiency(self, workers: float) -> float:
        """eta(D) at `workers` loader processes on the node."""
        return self.loading.curve.efficiency(workers)

    def predict_training(self, samples: TrainingSamples) -> FloatArray:
        """step_time_s per sample, in sample order."""
        return self.training.predict(raw_features(samples))

    def predict_loading(self, samples: LoadingSamples) -> FloatArray:
        """load_rate (mini-batches per second) per sample, in sample order.

        Raises UnknownPipeline for a pipeline the model was not fitted on.
        """
        return self.loading.predict(samples)

    def to_json(self) -> str:
        """The model as JSON text, format `FORMAT`, version `VERSION`."""
        document = {
            "format": FORMAT,
            "version": VERSION,
            "training": self.training.to_dict(),
            "loading": self.loading.to_dict(),
        }
        return json.dumps(document, allow_nan=False, separators=(",", ":")) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str) -> FittedTPM:
        """Read a model written by `to_json`; `source` names it in errors.

        Raises ModelFormatError for text that is not such a model, including other
        versions of the format.
        """
        try:
            document = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
        except json.JSONDecodeError as error:
            raise ModelFormatError(
                source,
                f"not JSON ({error.msg} at line {error.lineno}, column {error.colno}); "
                "give a model written by `stoker tpm fit`",
            ) from None
        except ValueError as error:
            raise ModelFormatError(source, f"{error}; refit the model") from None
        fields = Fields.root(document, source)
        if fields.data.get("format") != FORMAT:
            raise ModelFormatError(
                source,
                f"not a stoker throughput model (format {fields.data.get('format')!r}, "
                f"expected {FORMAT!r}); give a model written by `stoker tpm fit`",
            )
        version = fields.integer("version")
        if version != VERSION:
            raise ModelFormatError(
                source,
                f"model format version {version} is not supported; this stoker reads "
                f"version {VERSION}. Refit with `stoker tpm fit`",
            )
        return cls(
            training=TrainingModel.from_fields(fields.child("training")),
            loading=LoadingModel.from_fields(fields.child("loading")),
        )


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a model can hold")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a model parameter")
    return value


@dataclass(frozen=True)
class FitResult:
    """A fitted model and its JSON-ready report (see `fit`)."""

    model: FittedTPM
    report: dict[str, object]


def import_fitting_backend() -> None:
    """Import scikit-learn now instead of inside the first fit.

    Fitting imports it on first use (about a second) so that loading and querying a model
    stay quick; a caller that times `fit` calls this first to time the fitting alone.
    """
    importlib.import_module("sklearn.linear_model")
    importlib.import_module("sklearn.ensemble")


def fit(training: TrainingSamples, loading: LoadingSamples, *, seed: int = 0) -> FitResult:
    """Fit both halves of the model; `seed` fixes validation shuffles and the forest.

    The report has `training` (each candidate's held-out R^2 or why it was skipped, the
    chosen one, the validation used, the sample count, formula 6's alphas) and `loading`
    (held-out R^2, breakpoints [k1, k2] with null for an absent knee, stage slopes,
    per-pipeline sample costs, contention points, sample count). Raises SampleError.
    """
    training_fit = fit_training(training, seed=seed)
    loading_fit = fit_loading(loading, seed=seed)
    return FitResult(
        model=FittedTPM(training=training_fit.model, loading=loading_fit.model),
        report={"training": training_fit.report, "loading": loading_fit.report},
    )
