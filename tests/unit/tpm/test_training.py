"""Training-rate model: candidate selection, accuracy against a known truth, refusals."""

import numpy as np
import pytest

from tpm import (
    CANDIDATE_NAMES,
    STEP_TIME_FLOOR_S,
    SampleError,
    TpmError,
    TrainingModel,
    fit_training,
    read_training_samples,
)
from tpm.arrays import frozen_floats, frozen_ints
from tpm.candidates import PolynomialStepTime
from tpm.synthetic import TrainingTruth, training_csv, training_samples
from tpm.training import raw_features
from tpm.validation import r_squared

TRUTHS = {
    "compute-bound": TrainingTruth(),
    "communication-heavy": TrainingTruth(alpha0=1e-13, alpha1=2e-9, alpha4=2e-2),
}


@pytest.mark.parametrize("truth_name", TRUTHS)
@pytest.mark.parametrize("count", [60, 400])
def test_held_out_r2_of_the_training_rate_is_at_least_097(truth_name: str, count: int) -> None:
    truth = TRUTHS[truth_name]
    result = fit_training(training_samples(count, seed=count, truth=truth), seed=1)
    report = result.report
    assert report["validation"] == ("5-fold" if count < 200 else "holdout-60/40")
    candidates = report["candidates"]
    assert isinstance(candidates, dict)
    chosen = candidates[report["chosen"]]
    assert chosen["r2"] >= 0.97
    # Accuracy on samples the fit never saw, not only the report's word for it.
    fresh = training_samples(500, seed=count + 1, truth=truth)
    assert fresh.step_time_s is not None
    predicted = result.model.predict(raw_features(fresh))
    r2 = r_squared(fresh.step_time_s, predicted)
    assert r2 is not None
    assert r2 >= 0.97
    noiseless = truth.step_time_s(fresh.batch_size, fresh.flops, fresh.model_params, fresh.gpus)
    assert np.median(np.abs(predicted / noiseless - 1)) < 0.03


def test_report_scores_every_candidate_and_chooses_the_best() -> None:
    result = fit_training(training_samples(120, seed=4), seed=0)
    report = result.report
    candidates = report["candidates"]
    assert isinstance(candidates, dict)
    assert list(candidates) == list(CANDIDATE_NAMES)
    scores = {name: entry["r2"] for name, entry in candidates.items()}
    assert all(isinstance(r2, float) for r2 in scores.values())
    assert all(entry["skipped"] is None for entry in candidates.values())
    assert report["chosen"] == max(scores, key=lambda name: scores[name])
    assert result.model.candidate == report["chosen"]
    assert report["samples"] == 120
    alphas = report["alphas"]
    assert isinstance(alphas, dict)
    assert set(alphas) == {f"alpha{i}" for i in range(5)}


def test_the_chosen_candidate_is_refit_on_all_samples() -> None:
    samples = training_samples(100, seed=5)
    result = fit_training(samples, seed=0, candidates=["knn"])
    # k-NN stores what it was fitted on: all 100 samples, not a validation fold.
    params = result.model.to_dict()["params"]
    assert isinstance(params, dict)
    assert len(params["points"]) == 100


def test_a_candidate_needing_more_samples_than_a_fold_has_is_skipped_with_the_reason() -> None:
    result = fit_training(training_samples(12, seed=6), seed=0)
    candidates = result.report["candidates"]
    assert isinstance(candidates, dict)
    assert candidates["polynomial"]["r2"] is None
    assert candidates["polynomial"]["skipped"] == (
        "needs 16 samples per fit, but validation fits on 9; add samples"
    )
    assert isinstance(candidates["linear"]["r2"], float)
    assert result.report["chosen"] != "polynomial"


def test_restricting_candidates_scores_only_those() -> None:
    result = fit_training(training_samples(50, seed=7), candidates=["random_forest"])
    assert result.report["chosen"] == "random_forest"
    candidates = result.report["candidates"]
    assert isinstance(candidates, dict)
    assert list(candidates) == ["random_forest"]


def test_unknown_candidate_names_are_refused() -> None:
    with pytest.raises(TpmError, match="unknown training candidates \\['svm'\\]"):
        fit_training(training_samples(50, seed=7), candidates=["linear", "svm"])


def test_the_same_seed_gives_the_same_fit() -> None:
    samples = training_samples(90, seed=8)
    assert fit_training(samples, seed=3).report == fit_training(samples, seed=3).report


def test_fewer_than_eight_samples_are_refused_naming_how_many_are_needed() -> None:
    with pytest.raises(SampleError) as caught:
        fit_training(read_training_samples(training_csv(7, seed=1), "few.csv"))
    assert str(caught.value) == (
        "few.csv: 7 training samples, but fitting needs at least 8; add rows"
    )


def test_samples_without_step_times_cannot_be_fitted() -> None:
    text = "batch_size,flops,model_params,gpus\n" + "16,1e9,1e6,1\n" * 10
    samples = read_training_samples(text, "query.csv", require_target=False)
    with pytest.raises(SampleError) as caught:
        fit_training(samples)
    assert caught.value.column == "step_time_s"
    assert str(caught.value).startswith("query.csv: column step_time_s: no measured step times")


def test_predictions_never_fall_below_the_floor() -> None:
    # A polynomial that is negative everywhere: constant term -1, nothing else.
    powers = frozen_ints([[0, 0, 0, 0], [1, 0, 0, 0]])
    negative = PolynomialStepTime(
        mean=frozen_floats(np.zeros(4)),
        scale=frozen_floats(np.ones(4)),
        powers=powers,
        coefficients=frozen_floats([-1.0, 0.0]),
    )
    model = TrainingModel(candidate="polynomial", regressor=negative)
    predicted = model.predict(np.array([[16.0, 1e9, 1e6, 1.0], [32.0, 1e9, 1e6, 2.0]]))
    assert predicted.tolist() == [STEP_TIME_FLOOR_S, STEP_TIME_FLOOR_S]
