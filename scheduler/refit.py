"""Whether a refitted throughput model is trusted: its held-out R^2, training and loading,
must reach `SchedulerConfig.min_refit_r2`. A refit below it is refused and the model in use
stays; the daemon reports the refusal with its figures (`GET /v1/tpm`, the dashboard)."""

from dataclasses import dataclass

from scheduler.errors import RefitUntrusted


@dataclass(frozen=True)
class FitQuality:
    """A refit's held-out R^2 (`tpm.fit`'s report); None where it could not be measured."""

    training_r2: float | None
    loading_r2: float | None

    @staticmethod
    def of_report(report: dict[str, object]) -> "FitQuality":
        """From `tpm.fit`'s report: the chosen training candidate's R^2 and the loading one."""
        training = report.get("training")
        loading = report.get("loading")
        training_r2 = None
        if isinstance(training, dict):
            candidates, chosen = training.get("candidates"), training.get("chosen")
            if isinstance(candidates, dict) and isinstance(candidates.get(chosen), dict):
                training_r2 = _number(candidates[chosen].get("r2"))
        loading_r2 = _number(loading.get("r2")) if isinstance(loading, dict) else None
        return FitQuality(training_r2, loading_r2)


def check_fit(quality: FitQuality, min_r2: float) -> None:
    """RefitUntrusted unless both held-out R^2 reach `min_r2` (one not measured fails: a
    fit nothing was held out from is not known to predict anything)."""
    for part, r2 in (("training", quality.training_r2), ("loading", quality.loading_r2)):
        if r2 is None or r2 < min_r2:
            raise RefitUntrusted(part, r2, min_r2)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None
