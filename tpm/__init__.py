"""Throughput prediction model (paper Sec. III-B): training rate, loading rate, contention.

Pure: parses CSV text it is given and returns JSON text; never touches files, sockets,
threads or the clock. Entry points:

- `read_training_samples`, `read_loading_samples`, `read_samples`: CSV text to samples;
- `fit` (or `fit_training`, `fit_loading`): samples to a `FitResult` (model and report);
- `FittedTPM`: predictions for the allocator, `to_json` / `FittedTPM.from_json`.
"""

from tpm.candidates import Formula6Coefficients
from tpm.contention import ContentionFit
from tpm.errors import (
    ModelFormatError,
    QueryError,
    SampleError,
    TpmError,
    UnknownModel,
    UnknownPipeline,
)
from tpm.loading import LoadingFit, LoadingModel, fit_loading
from tpm.model import FORMAT, VERSION, FitResult, FittedTPM, fit, import_fitting_backend
from tpm.samples import (
    LoadingSamples,
    TrainingSamples,
    detect_kind,
    read_loading_samples,
    read_samples,
    read_training_samples,
)
from tpm.training import (
    CANDIDATE_NAMES,
    STEP_TIME_FLOOR_S,
    TrainingFit,
    TrainingModel,
    fit_training,
)

__all__ = [
    "CANDIDATE_NAMES",
    "FORMAT",
    "STEP_TIME_FLOOR_S",
    "VERSION",
    "ContentionFit",
    "FitResult",
    "FittedTPM",
    "Formula6Coefficients",
    "LoadingFit",
    "LoadingModel",
    "LoadingSamples",
    "ModelFormatError",
    "QueryError",
    "SampleError",
    "TpmError",
    "TrainingFit",
    "TrainingModel",
    "TrainingSamples",
    "UnknownModel",
    "UnknownPipeline",
    "detect_kind",
    "fit",
    "fit_loading",
    "fit_training",
    "import_fitting_backend",
    "read_loading_samples",
    "read_samples",
    "read_training_samples",
]
