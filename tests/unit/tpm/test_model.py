"""FittedTPM: the allocator's interface, the fit report, and the JSON file format."""

import inspect
import json

import numpy as np
import pytest

from tpm import (
    CANDIDATE_NAMES,
    FittedTPM,
    ModelFormatError,
    QueryError,
    TpmError,
    UnknownPipeline,
    fit,
    fit_loading,
    fit_training,
)
from tpm.synthetic import loading_samples, training_samples


@pytest.fixture(scope="module")
def fitted() -> FittedTPM:
    return fit(training_samples(120, seed=1), loading_samples(120, seed=2)).model


def document_of(model: FittedTPM) -> dict[str, object]:
    document = json.loads(model.to_json())
    assert isinstance(document, dict)
    return document


def test_fit_report_has_the_documented_keys() -> None:
    report = fit(training_samples(60, seed=3), loading_samples(60, seed=4)).report
    training, loading = report["training"], report["loading"]
    assert isinstance(training, dict)
    assert isinstance(loading, dict)
    assert {"candidates", "chosen", "validation", "samples"} <= set(training)
    assert set(training["candidates"]) == set(CANDIDATE_NAMES)
    for entry in training["candidates"].values():
        assert set(entry) == {"r2", "skipped"}
    assert {"r2", "breakpoints", "stage_slopes", "pipelines", "samples"} <= set(loading)
    assert len(loading["breakpoints"]) == 2
    # The report is JSON as it stands.
    assert json.loads(json.dumps(report)) == report


def test_the_allocator_protocol_is_implemented_with_its_exact_signatures() -> None:
    step = inspect.signature(FittedTPM.predict_step_time_s)
    assert list(step.parameters) == [
        "self",
        "batch_size_per_gpu",
        "flops",
        "model_params",
        "gpus",
    ]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(step.parameters.values())[1:])
    assert list(inspect.signature(FittedTPM.predict_sample_cost_s).parameters) == [
        "self",
        "pipeline",
    ]
    assert list(inspect.signature(FittedTPM.contention_points).parameters) == ["self"]


def test_step_time_for_one_job_agrees_with_the_vectorised_prediction(fitted: FittedTPM) -> None:
    samples = training_samples(5, seed=5)
    batch = fitted.predict_training(samples)
    for i in range(5):
        one = fitted.predict_step_time_s(
            batch_size_per_gpu=float(samples.batch_size[i]),
            flops=float(samples.flops[i]),
            model_params=float(samples.model_params[i]),
            gpus=int(samples.gpus[i]),
        )
        # One row or five go through BLAS differently; they agree to rounding.
        assert one == pytest.approx(batch[i], rel=1e-12)
        assert one > 0


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"batch_size_per_gpu": 0.0}, "batch_size_per_gpu must be a positive finite number"),
        ({"flops": float("nan")}, "flops must be a positive finite number"),
        ({"model_params": -1.0}, "model_params must be a positive finite number"),
        ({"gpus": 0}, "gpus must be a positive integer"),
        ({"gpus": 2.5}, "gpus must be a positive integer"),
    ],
)
def test_step_time_queries_outside_the_domain_are_refused(
    fitted: FittedTPM, arguments: dict[str, float], problem: str
) -> None:
    query: dict[str, float] = {
        "batch_size_per_gpu": 32.0,
        "flops": 1e9,
        "model_params": 1e7,
        "gpus": 2,
    }
    query.update(arguments)
    with pytest.raises(QueryError, match=problem):
        fitted.predict_step_time_s(**query)  # type: ignore[arg-type]


def test_sample_cost_and_contention_come_from_the_loading_model(fitted: FittedTPM) -> None:
    assert fitted.predict_sample_cost_s("cifar-flip") == fitted.loading.cost("cifar-flip")
    assert fitted.contention_points() == fitted.loading.curve.points()
    with pytest.raises(UnknownPipeline, match="the model knows 'cifar-flip'") as caught:
        fitted.predict_sample_cost_s("nope")
    assert isinstance(caught.value, TpmError)


@pytest.mark.parametrize("candidate", CANDIDATE_NAMES)
def test_every_candidate_round_trips_through_json_exactly(candidate: str) -> None:
    training = fit_training(training_samples(80, seed=6), candidates=[candidate]).model
    loading = fit_loading(loading_samples(80, seed=7)).model
    model = FittedTPM(training=training, loading=loading)
    text = model.to_json()
    copy = FittedTPM.from_json(text, "model.json")
    assert copy.training.candidate == candidate
    fresh_training = training_samples(200, seed=8)
    fresh_loading = loading_samples(200, seed=9)
    assert np.array_equal(
        model.predict_training(fresh_training), copy.predict_training(fresh_training)
    )
    assert np.array_equal(model.predict_loading(fresh_loading), copy.predict_loading(fresh_loading))
    assert copy.contention_points() == model.contention_points()
    assert copy.to_json() == text


def test_saved_model_names_its_format_and_version(fitted: FittedTPM) -> None:
    document = document_of(fitted)
    assert document["format"] == "stoker-tpm"
    assert document["version"] == 1


def test_another_version_is_refused_with_what_to_do(fitted: FittedTPM) -> None:
    document = document_of(fitted)
    document["version"] = 2
    with pytest.raises(ModelFormatError) as caught:
        FittedTPM.from_json(json.dumps(document), "old.json")
    assert str(caught.value) == (
        "old.json: model format version 2 is not supported; this stoker reads version 1. "
        "Refit with `stoker tpm fit`"
    )
    assert caught.value.source == "old.json"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "not JSON"),
        ("{", "not JSON"),
        ("[1, 2]", "the model must be a JSON object"),
        ('{"format": "other"}', "not a stoker throughput model"),
        ('{"format": "stoker-tpm", "version": "1"}', "field version must be an integer"),
        ('{"format": "stoker-tpm", "version": 1}', "field training is missing"),
        ('{"format": "stoker-tpm", "version": 1, "training": NaN}', "NaN is not a number"),
        ('{"format": "stoker-tpm", "version": 1, "training": 1e999}', "1e999 is out of range"),
    ],
)
def test_text_that_is_not_a_model_is_refused(text: str, problem: str) -> None:
    with pytest.raises(ModelFormatError, match=problem) as caught:
        FittedTPM.from_json(text, "m.json")
    assert str(caught.value).startswith("m.json: ")


def test_a_damaged_field_is_named_by_its_path(fitted: FittedTPM) -> None:
    document = document_of(fitted)
    loading = document["loading"]
    assert isinstance(loading, dict)
    loading["sample_cost_s"]["cifar-flip"] = "fast"
    with pytest.raises(ModelFormatError, match=r"field loading\.sample_cost_s\.cifar-flip"):
        FittedTPM.from_json(json.dumps(document), "m.json")


def test_an_unknown_candidate_name_is_refused(fitted: FittedTPM) -> None:
    document = document_of(fitted)
    training = document["training"]
    assert isinstance(training, dict)
    training["candidate"] = "svm"
    with pytest.raises(ModelFormatError, match=r"field training\.candidate must be one of linear"):
        FittedTPM.from_json(json.dumps(document), "m.json")
