"""Loading-rate model: segmented regression against known contention curves."""

import numpy as np
import pytest

from tpm import (
    LoadingFit,
    SampleError,
    UnknownPipeline,
    fit_loading,
    read_loading_samples,
)
from tpm.synthetic import LoadingTruth, loading_csv, loading_samples
from tpm.validation import r_squared

TRUTHS = {
    "paper 11/24": LoadingTruth(11.0, 24.0, 0.4),
    "knees 6/16": LoadingTruth(6.0, 16.0, 0.3),
    "no saturation in range": LoadingTruth(11.0, 40.0, 0.5),
    "contention-free": LoadingTruth(None, None, 1.0),
    "saturation without contention": LoadingTruth(8.0, None, 0.0),
}
# What a fit should report as knees: none where the truth has none inside 1..32 workers.
EXPECTED_BREAKPOINTS = {
    "paper 11/24": (11.0, 24.0),
    "knees 6/16": (6.0, 16.0),
    "no saturation in range": (11.0, None),
    "contention-free": (None, None),
    "saturation without contention": (8.0, None),
}


def breakpoints(fit: LoadingFit) -> tuple[float | None, float | None]:
    knees = fit.report["breakpoints"]
    assert isinstance(knees, list)
    first, second = knees
    assert first is None or isinstance(first, float)
    assert second is None or isinstance(second, float)
    return first, second


@pytest.mark.parametrize("truth_name", TRUTHS)
@pytest.mark.parametrize("count", [96, 600])
def test_learned_curve_matches_the_truth(truth_name: str, count: int) -> None:
    truth = TRUTHS[truth_name]
    fit = fit_loading(loading_samples(count, seed=count, truth=truth), seed=2)
    report = fit.report
    r2 = report["r2"]
    assert isinstance(r2, float)
    assert r2 >= 0.99
    for learned, true in zip(breakpoints(fit), EXPECTED_BREAKPOINTS[truth_name], strict=True):
        if true is None:
            assert learned is None
        else:
            assert learned is not None
            assert abs(learned - true) <= 2.0
    # Costs per pipeline within 5 % of the truth.
    for pipeline, cost in truth.sample_cost_s:
        assert fit.model.cost(pipeline) == pytest.approx(cost, rel=0.05)


@pytest.mark.parametrize("truth_name", ["paper 11/24", "no saturation in range"])
def test_predicted_load_rates_on_fresh_samples(truth_name: str) -> None:
    truth = TRUTHS[truth_name]
    fit = fit_loading(loading_samples(300, seed=1, truth=truth))
    fresh = loading_samples(500, seed=99, truth=truth)
    assert fresh.load_rate is not None
    r2 = r_squared(fresh.load_rate, fit.model.predict(fresh))
    assert r2 is not None
    assert r2 >= 0.99
    noiseless = loading_samples(500, seed=99, truth=truth, noise=0.0)
    assert noiseless.load_rate is not None
    relative = np.abs(fit.model.predict(noiseless) / noiseless.load_rate - 1)
    assert np.median(relative) < 0.02


def test_noiseless_samples_give_the_knees_almost_exactly() -> None:
    fit = fit_loading(loading_samples(400, seed=3, truth=TRUTHS["paper 11/24"], noise=0.0))
    first, second = breakpoints(fit)
    assert first == pytest.approx(11.0, abs=0.1)
    assert second == pytest.approx(24.0, abs=0.1)
    assert fit.report["stage_slopes"] == pytest.approx([1.0, 0.4, 0.0], abs=1e-3)


def test_report_lists_stages_costs_and_points() -> None:
    fit = fit_loading(loading_samples(150, seed=4))
    report = fit.report
    assert report["validation"] == "5-fold"
    assert report["samples"] == 150
    assert report["stages"] == 3
    assert report["pipelines"] == dict(fit.model.sample_cost_s)
    assert report["contention"] == [list(point) for point in fit.model.curve.points()]
    assert fit_loading(loading_samples(250, seed=4)).report["validation"] == "holdout-60/40"


def test_the_same_seed_gives_the_same_fit() -> None:
    samples = loading_samples(120, seed=5)
    assert fit_loading(samples, seed=1).report == fit_loading(samples, seed=1).report


def test_unknown_pipeline_is_refused_naming_the_known_ones() -> None:
    fit = fit_loading(loading_samples(60, seed=6))
    with pytest.raises(UnknownPipeline) as caught:
        fit.model.cost("video-decode")
    assert caught.value.pipeline == "video-decode"
    assert caught.value.known == ("cifar-flip", "imagenet-crop", "imagenet-randaug")
    assert str(caught.value) == (
        "unknown pipeline 'video-decode'; the model knows 'cifar-flip', 'imagenet-crop', "
        "'imagenet-randaug'. Add loading samples for it and refit."
    )


def test_predicting_a_file_with_an_unknown_pipeline_names_it() -> None:
    fit = fit_loading(loading_samples(60, seed=6))
    queries = read_loading_samples(
        "pipeline,batch_size,workers\ncifar-flip,32,4\nvideo,32,4\naudio,32,4\n",
        "q.csv",
        require_target=False,
    )
    with pytest.raises(UnknownPipeline, match="unknown pipeline 'audio'"):
        fit.model.predict(queries)


def test_fewer_than_eight_samples_are_refused_naming_how_many_are_needed() -> None:
    with pytest.raises(SampleError) as caught:
        fit_loading(read_loading_samples(loading_csv(6, seed=1), "few.csv"))
    assert str(caught.value) == "few.csv: 6 loading samples, but fitting needs at least 8; add rows"


def test_a_pipeline_with_a_single_sample_is_refused() -> None:
    text = loading_csv(12, seed=1) + "lonely,32,4,100.0,x\n"
    with pytest.raises(SampleError) as caught:
        fit_loading(read_loading_samples(text, "load.csv"))
    assert caught.value.column == "pipeline"
    assert str(caught.value) == (
        "load.csv: column pipeline: pipeline 'lonely' has 1 sample, but each pipeline needs "
        "at least 2; add rows for it"
    )


def test_samples_without_load_rates_cannot_be_fitted() -> None:
    text = "pipeline,batch_size,workers\n" + "a,32,4\n" * 10
    samples = read_loading_samples(text, "query.csv", require_target=False)
    with pytest.raises(SampleError, match=r"^query\.csv: column load_rate: no measured load"):
        fit_loading(samples)


def test_a_single_worker_count_gives_a_contention_free_curve() -> None:
    text = "pipeline,batch_size,workers,load_rate\n" + "a,32,4,10\na,32,4,11\n" * 5
    fit = fit_loading(read_loading_samples(text, "load.csv"))
    assert breakpoints(fit) == (None, None)
    assert fit.model.cost("a") == pytest.approx(4 / (32 * 10.5), rel=0.01)
