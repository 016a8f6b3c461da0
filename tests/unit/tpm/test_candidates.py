"""The step-time regressors of Table I, each on its own."""

import json
from collections.abc import Callable

import numpy as np
import pytest
from sklearn.ensemble import RandomForestRegressor

from tpm import ModelFormatError
from tpm.arrays import FloatArray
from tpm.candidates import (
    Formula6Coefficients,
    NeighboursStepTime,
    PolynomialStepTime,
    StepTimeRegressor,
    fit_linear,
    fit_neighbours,
    fit_polynomial,
    formula6_features,
)
from tpm.fields import Fields
from tpm.forest import ForestStepTime, fit_forest, forest_from_estimator
from tpm.synthetic import TrainingTruth, training_samples
from tpm.training import raw_features

TRUTH = TrainingTruth()


def data(count: int, seed: int, noise: float = 0.05) -> tuple[FloatArray, FloatArray]:
    samples = training_samples(count, seed, TRUTH, noise)
    assert samples.step_time_s is not None
    return raw_features(samples), samples.step_time_s


def truth_of(raw: FloatArray) -> FloatArray:
    return TRUTH.step_time_s(raw[:, 0], raw[:, 1], raw[:, 2], raw[:, 3])


def reloaded(params: dict[str, object]) -> Fields:
    return Fields.root(json.loads(json.dumps(params)), "m.json")


def test_formula6_features_are_the_papers_terms() -> None:
    raw = np.array([[32.0, 2e9, 1e7, 4.0]])
    assert formula6_features(raw).tolist() == [[32 * 2e9, 1e7 * 4, 32 * 1e7, 1e7, 1.0]]


def test_linear_recovers_the_alphas_from_noiseless_samples() -> None:
    raw, step = data(200, seed=1, noise=0.0)
    alphas = fit_linear(raw, step, seed=0)
    expected = [TRUTH.alpha0, TRUTH.alpha1, TRUTH.alpha2, TRUTH.alpha3, TRUTH.alpha4]
    assert alphas.as_array() == pytest.approx(expected, rel=1e-4)


def test_linear_alphas_stay_non_negative_when_a_term_is_absent() -> None:
    raw, _ = data(200, seed=2, noise=0.0)
    # A truth with no per-GPU communication and no update cost.
    step = 4e-13 * raw[:, 0] * raw[:, 1] + 5e-3
    alphas = fit_linear(raw, step, seed=0).as_array()
    assert (alphas >= 0).all()
    assert alphas[0] == pytest.approx(4e-13, rel=1e-3)


def test_polynomial_contains_formula6_and_fits_it_closely() -> None:
    raw, step = data(300, seed=3, noise=0.0)
    model = fit_polynomial(raw, step, seed=0)
    fresh, _ = data(200, seed=4, noise=0.0)
    relative = np.abs(model.predict(fresh) / truth_of(fresh) - 1)
    assert np.median(relative) < 0.01


def test_neighbours_average_the_nearest_samples_in_log_space() -> None:
    raw = np.array([[16.0, 1e9, 1e6, 1.0]] * 5 + [[256.0, 1e10, 1e8, 8.0]] * 5)
    step = np.array([0.1, 0.1, 0.1, 0.1, 0.4] + [2.0] * 5)
    model = fit_neighbours(raw, step, seed=0)
    (predicted,) = model.predict(np.array([[17.0, 1.1e9, 1e6, 1.0]]))
    assert predicted == pytest.approx(np.exp(np.mean(np.log(step[:5]))))


def test_forest_walk_matches_scikit_learns_own_prediction() -> None:
    raw, step = data(300, seed=5)
    forest = RandomForestRegressor(n_estimators=7, min_samples_leaf=2, random_state=0)
    forest.fit(np.log(raw), np.log(step))
    fresh, _ = data(100, seed=6)
    ours = forest_from_estimator(forest).predict(fresh)
    theirs = np.exp(forest.predict(np.log(fresh)))
    assert ours == pytest.approx(theirs, rel=1e-12)


def test_forest_is_reproducible_for_a_seed() -> None:
    raw, step = data(80, seed=7)
    first = fit_forest(raw, step, seed=11).predict(raw)
    assert np.array_equal(first, fit_forest(raw, step, seed=11).predict(raw))
    assert not np.array_equal(first, fit_forest(raw, step, seed=12).predict(raw))


@pytest.mark.parametrize(
    ("fit", "load"),
    [
        (fit_linear, Formula6Coefficients.from_fields),
        (fit_polynomial, PolynomialStepTime.from_fields),
        (fit_neighbours, NeighboursStepTime.from_fields),
        (fit_forest, ForestStepTime.from_fields),
    ],
    ids=["linear", "polynomial", "knn", "random_forest"],
)
def test_each_regressor_predicts_exactly_the_same_after_a_json_round_trip(
    fit: Callable[[FloatArray, FloatArray, int], StepTimeRegressor],
    load: Callable[[Fields], StepTimeRegressor],
) -> None:
    raw, step = data(120, seed=8)
    model = fit(raw, step, 0)
    copy = load(reloaded(model.to_dict()))
    fresh, _ = data(50, seed=9)
    assert np.array_equal(model.predict(fresh), copy.predict(fresh))


def test_polynomial_with_a_coefficient_missing_is_refused() -> None:
    raw, step = data(60, seed=10)
    params = fit_polynomial(raw, step, seed=0).to_dict()
    coefficients = params["coefficients"]
    assert isinstance(coefficients, list)
    params["coefficients"] = coefficients[:-1]
    with pytest.raises(ModelFormatError, match="coefficients must be one number per monomial"):
        PolynomialStepTime.from_fields(reloaded(params))


def test_forest_with_a_child_pointing_backwards_is_refused() -> None:
    raw, step = data(60, seed=10)
    params = fit_forest(raw, step, seed=0).to_dict()
    trees = params["trees"]
    assert isinstance(trees, list)
    trees[0]["left"][0] = 0
    with pytest.raises(ModelFormatError, match=r"trees\[0\]\.left must be child indices"):
        ForestStepTime.from_fields(reloaded(params))


def test_neighbours_asking_for_more_neighbours_than_points_are_refused() -> None:
    raw, step = data(20, seed=10)
    params = fit_neighbours(raw, step, seed=0).to_dict()
    params["neighbours"] = 21
    with pytest.raises(ModelFormatError, match="neighbours must be between 1 and the 20"):
        NeighboursStepTime.from_fields(reloaded(params))
