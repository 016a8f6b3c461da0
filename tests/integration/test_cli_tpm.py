"""`stoker tpm fit`, `predict` and `upload` (to a live daemon) through the installed
console script."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cli import stoker
from tests.integration.daemon_harness import Daemon, daemon_factory
from tpm import FittedTPM, read_loading_samples, read_training_samples
from tpm.synthetic import loading_csv, training_csv

TOKENS = {"admin": "admin-token-for-the-upload-tests", "alice": "alice-token-for-the-uploads"}


@pytest.fixture
def sample_files(tmp_path: Path) -> tuple[Path, Path]:
    train = tmp_path / "train.csv"
    load = tmp_path / "load.csv"
    train.write_text(training_csv(150, seed=1))
    load.write_text(loading_csv(150, seed=2))
    return train, load


def test_fit_then_predict_both_kinds(tmp_path: Path, sample_files: tuple[Path, Path]) -> None:
    train, load = sample_files
    model_path = tmp_path / "model.json"
    fitted = stoker("tpm", "fit", train, load, "--out", model_path, "--seed", "3", cwd=tmp_path)
    assert fitted.code == 0, fitted.stderr
    report: Any = fitted.json()
    assert set(report) >= {"training", "loading", "fit_seconds"}
    assert set(report["training"]["candidates"]) == {
        "linear",
        "polynomial",
        "knn",
        "random_forest",
    }
    assert report["training"]["chosen"] in report["training"]["candidates"]
    assert report["training"]["validation"] == "5-fold"
    assert len(report["loading"]["breakpoints"]) == 2
    assert report["loading"]["r2"] >= 0.99
    assert 0 < report["fit_seconds"] < 30
    # Nothing but the model is left behind: the temporary file was renamed into place.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["load.csv", "model.json", "train.csv"]
    model = FittedTPM.from_json(model_path.read_text(), str(model_path))

    # Query files without the target column, predicted in row order.
    queries = tmp_path / "queries.csv"
    queries.write_text(
        "gpus,model_params,flops,batch_size\n1,11.7e6,1.8e9,32\n8,138e6,15.5e9,64\n4,25.6e6,4.1e9,16\n"
    )
    predicted = stoker("tpm", "predict", model_path, queries, cwd=tmp_path)
    assert predicted.code == 0, predicted.stderr
    output: Any = predicted.json()
    assert list(output) == ["step_time_s"]
    expected = model.predict_training(
        read_training_samples(queries.read_text(), "q", require_target=False)
    )
    assert output["step_time_s"] == expected.tolist()
    assert output["step_time_s"][1] > output["step_time_s"][0]

    loaded = stoker("tpm", "predict", model_path, load, cwd=tmp_path)
    assert loaded.code == 0, loaded.stderr
    rates: Any = loaded.json()
    assert list(rates) == ["load_rate"]
    samples = read_loading_samples(load.read_text(), "l")
    assert rates["load_rate"] == model.predict_loading(samples).tolist()
    assert len(rates["load_rate"]) == 150


def test_bad_sample_file_exits_2_naming_file_row_and_column_and_keeps_the_old_model(
    tmp_path: Path, sample_files: tuple[Path, Path]
) -> None:
    train, load = sample_files
    lines = train.read_text().splitlines()
    fields = lines[3].split(",")
    fields[-1] = "abc"
    lines[3] = ",".join(fields)
    train.write_text("\n".join(lines) + "\n")
    model_path = tmp_path / "model.json"
    model_path.write_text("previous model\n")
    result = stoker("tpm", "fit", train, load, "--out", model_path, cwd=tmp_path)
    assert result.code == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"error: {train}: row 3, column step_time_s: 'abc' is not a number; "
        "give the training step time in seconds as a positive number\n"
    )
    assert model_path.read_text() == "previous model\n"


def test_an_unwritable_output_path_exits_2_without_leaving_files(
    tmp_path: Path, sample_files: tuple[Path, Path]
) -> None:
    train, load = sample_files
    result = stoker("tpm", "fit", train, load, "--out", tmp_path / "no" / "m.json", cwd=tmp_path)
    assert result.code == 2
    assert result.stderr == (
        f"error: {tmp_path / 'no' / 'm.json'}: cannot write the model there: "
        "No such file or directory\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["load.csv", "train.csv"]


def test_missing_sample_file_exits_2_with_a_clear_message(
    tmp_path: Path, sample_files: tuple[Path, Path]
) -> None:
    _, load = sample_files
    result = stoker("tpm", "fit", "absent.csv", load, "--out", "m.json", cwd=tmp_path)
    assert result.code == 2
    assert result.stderr == "error: absent.csv: no such training samples file\n"
    assert not (tmp_path / "m.json").exists()


def test_predict_refuses_another_model_version(tmp_path: Path) -> None:
    model_path = tmp_path / "model.json"
    model_path.write_text(json.dumps({"format": "stoker-tpm", "version": 9}))
    queries = tmp_path / "q.csv"
    queries.write_text("pipeline,batch_size,workers\nvideo,32,4\n")
    refused = stoker("tpm", "predict", model_path, queries, cwd=tmp_path)
    assert refused.code == 2
    assert refused.stderr.startswith(
        f"error: {model_path}: model format version 9 is not supported"
    )
    assert "Traceback" not in refused.stderr


def test_predict_refuses_a_pipeline_the_model_does_not_know(
    tmp_path: Path, sample_files: tuple[Path, Path]
) -> None:
    train, load = sample_files
    model_path = tmp_path / "model.json"
    assert stoker("tpm", "fit", train, load, "--out", model_path, cwd=tmp_path).code == 0
    queries = tmp_path / "q.csv"
    queries.write_text("pipeline,batch_size,workers\nimagenet-crop,32,4\nvideo,32,4\n")
    refused = stoker("tpm", "predict", model_path, queries, cwd=tmp_path)
    assert refused.code == 2
    assert refused.stdout == ""
    assert refused.stderr == (
        f"error: {queries}: column pipeline: unknown pipeline 'video'; the model knows "
        "'cifar-flip', 'imagenet-crop', 'imagenet-randaug'. Add loading samples for it and "
        "refit.\n"
    )


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    factory = daemon_factory(tmp_path_factory.mktemp("upload"))
    yield next(factory)(tokens=TOKENS)
    next(factory, None)


def stored(daemon: Daemon) -> dict[str, int]:
    with daemon.client() as client:
        counts: dict[str, int] = client.get("/v1/tpm").json()["samples"]
    return counts


def test_upload_gives_a_live_daemon_samples_it_refits_on(daemon: Daemon, tmp_path: Path) -> None:
    train, load = tmp_path / "train.csv", tmp_path / "load.csv"
    train.write_text(training_csv(1000, seed=1))  # 69 KB: over a request's 64 KiB limit
    # The daemon refits only on samples that can predict its jobs' pipeline, `imagenet`.
    load.write_text(loading_csv(150, seed=2).replace("imagenet-crop", "imagenet"))
    before = stored(daemon)
    where = ("--url", daemon.url, "--token", TOKENS["admin"])
    trained = stoker("tpm", "upload", train, *where)
    assert trained.code == 0, trained.stderr
    assert trained.json() == {
        "kind": "training",
        "added": 1000,
        "samples": {"training": before["training"] + 1000, "loading": before["loading"]},
    }
    loaded = stoker("tpm", "upload", load, "--kind", "loading", *where)
    assert loaded.code == 0, loaded.stderr
    assert loaded.json()["added"] == 150
    with daemon.client() as client:
        refit = client.post("/v1/tpm/fit")
        assert refit.status_code == 200, refit.text
        report = refit.json()["report"]
    assert report["training"]["samples"] == before["training"] + 1000
    assert set(report["loading"]["pipelines"]) == {"cifar-flip", "imagenet", "imagenet-randaug"}


@pytest.mark.parametrize(
    ("text", "kind", "words"),
    [
        ("batch_size,flops,model_params,gpus\n32,1e9,1e6,1\n", None,
         "column step_time_s: missing column"),
        ("batch_size,flops,model_params,gpus,step_time_s\n32,1e9,1e6,1,0.1\n", "loading",
         "column pipeline: missing column"),
        ("pipeline,batch_size,workers,load_rate\nimagenet,32,4,abc\n", None,
         "row 1, column load_rate: 'abc' is not a number"),
        ("a,b\n1,2\n", None, "cannot tell the kind of samples from the header"),
    ],
)  # fmt: skip
def test_upload_of_a_bad_file_names_what_is_wrong_and_sends_nothing(
    daemon: Daemon, tmp_path: Path, text: str, kind: str | None, words: str
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    before = stored(daemon)
    given = ("--kind", kind) if kind else ()
    run = stoker("tpm", "upload", bad, *given, "--url", daemon.url, "--token", TOKENS["admin"])
    assert run.code == 2 and run.stdout == ""
    assert run.stderr.startswith(f"error: {bad}: ") and words in run.stderr, run.stderr
    assert stored(daemon) == before


def test_upload_needs_the_admin_token(daemon: Daemon, tmp_path: Path) -> None:
    train = tmp_path / "train.csv"
    train.write_text(training_csv(20, seed=1))
    run = stoker("tpm", "upload", train, "--url", daemon.url, "--token", TOKENS["alice"])
    assert run.code == 2 and "403" in run.stderr and "admin" in run.stderr
