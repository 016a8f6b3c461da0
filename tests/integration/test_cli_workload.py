"""`stoker workload generate`, `trace` and `run` (the last against a live daemon)."""

import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.cli import Run, stoker
from tests.integration.daemon_harness import Daemon, daemon_factory


def simulated_ids(workload_file: Path) -> list[str]:
    run = stoker("simulate", workload_file, "--policy", "waa", "--json")
    assert run.code == 0, run.stderr
    jobs = run.json()["jobs"]
    assert isinstance(jobs, list)
    for job in jobs:
        assert job["end_s"] > job["start_s"]
    return [job["id"] for job in jobs]


def test_generate_writes_a_workload_that_simulates(tmp_path: Path) -> None:
    out = tmp_path / "generated.toml"
    run = stoker(
        "workload", "generate", "--jobs", "5", "--seed", "3", "--mean-interarrival-s", "40",
        "--min-iterations", "50", "--max-iterations", "200", "--out", out,
    )  # fmt: skip
    assert run.code == 0, run.stderr
    assert f"wrote 5 jobs to {out}" in run.stdout
    written = tomllib.loads(out.read_text(encoding="utf-8"))
    ids = [job["id"] for job in written["jobs"]]
    assert len(ids) == 5
    assert simulated_ids(out) == ids


def test_generate_prints_toml_without_out_and_takes_given_arrivals() -> None:
    run = stoker(
        "workload", "generate", "--arrivals", "0,120,420", "--models", "Resnet18,smVGG7",
        "--gpus", "2", "--cpu-workers", "12",
    )  # fmt: skip
    assert run.code == 0, run.stderr
    data = tomllib.loads(run.stdout)
    assert [job["arrival_s"] for job in data["jobs"]] == [0.0, 120.0, 420.0]
    assert {job["model"] for job in data["jobs"]} <= {"Resnet18", "smVGG7"}
    assert data["node"] == {"gpus": 2, "cpu_workers": 12, "max_jobs_per_gpu": 1}


def test_trace_replay_writes_a_workload_that_simulates(tmp_path: Path) -> None:
    out = tmp_path / "trace.toml"
    run = stoker("workload", "trace", "--limit", "20", "--out", out)
    assert run.code == 0, run.stderr
    written = tomllib.loads(out.read_text(encoding="utf-8"))
    assert len(written["jobs"]) == 20
    assert "Gavel/Philly trace" in written["description"]
    assert simulated_ids(out) == [job["id"] for job in written["jobs"]]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("generate",), "--jobs"),
        (("generate", "--jobs", "3", "--arrivals", "0,x,5"), "--arrivals: 'x' is not a number"),
        (("generate", "--jobs", "3", "--gpu-counts", "8"), "--gpu-counts"),
        (("generate", "--jobs", "3", "--models", "Alexnet"), "--models"),
        (("trace", "--load", "0"), "--load"),
        (("trace", "--limit", "0"), "--limit"),
        (("trace", "no-such-trace.tsv"), "no such trace file"),
    ],
)
def test_bad_input_exits_2_naming_the_option(args: tuple[str, ...], words: str) -> None:
    run = stoker("workload", *args)
    assert run.code == 2
    assert run.stderr.startswith("error: ") and words in run.stderr
    assert "Traceback" not in run.stderr


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    yield from daemon_factory(tmp_path)


def run_on(daemon: Daemon, workload: Path) -> Run:
    """`stoker workload run` at 20x speed against `daemon`, as its admin."""
    return stoker(
        "workload", "run", workload, "--speed", "20",
        "--url", daemon.url, "--token", daemon.tokens["admin"],
    )  # fmt: skip


def test_workload_run_submits_on_schedule_and_waits(
    serve: Callable[..., Daemon], tmp_path: Path
) -> None:
    daemon = serve()
    workload = tmp_path / "w.toml"
    workload.write_text(
        'name = "two"\n'
        '[[jobs]]\nid = "early"\nmodel = "smResnet20"\nbatch_size = 64\ngpus = 1\n'
        "iterations = 60\narrival_s = 0\n"
        '[[jobs]]\nid = "late"\nmodel = "Resnet18"\nbatch_size = 64\ngpus = 2\n'
        "iterations = 60\narrival_s = 20\n"
    )
    run = run_on(daemon, workload)
    assert run.code == 0, run.stderr
    submitted = run.json()["jobs"]
    assert isinstance(submitted, dict) and set(submitted) == {"early", "late"}
    with daemon.client() as client:
        jobs = client.get("/v1/jobs").json()
    assert {job["state"] for job in jobs} == {"completed"}
    early, late = sorted(jobs, key=lambda job: job["submitted_at"])
    assert late["submitted_at"] - early["submitted_at"] >= 0.9  # 20 s at speed 20


def test_run_goes_on_past_refused_jobs_and_names_them_at_the_end(
    serve: Callable[..., Daemon], tmp_path: Path
) -> None:
    daemon = serve()  # 4 CPU training slots in place of GPUs
    workload = tmp_path / "w.toml"
    workload.write_text(
        'name = "mixed"\n[node]\ngpus = 8\n'
        '[[jobs]]\nid = "fits"\nmodel = "smResnet20"\nbatch_size = 64\ngpus = 1\n'
        "iterations = 40\narrival_s = 0\n"
        '[[jobs]]\nid = "too-wide"\nmodel = "Resnet18"\nbatch_size = 64\ngpus = 8\n'
        "iterations = 40\narrival_s = 1\n"
        '[[jobs]]\nid = "pinned-off-node"\nmodel = "Resnet18"\nbatch_size = 64\ngpus = 1\n'
        "gpu_indices = [6]\niterations = 40\narrival_s = 2\n"
        '[[jobs]]\nid = "after"\nmodel = "smVGG7"\nbatch_size = 64\ngpus = 1\n'
        "iterations = 40\narrival_s = 3\n"
    )
    run = run_on(daemon, workload)
    assert run.code == 1, run.stderr
    summary = run.json()
    accepted = summary["jobs"]
    assert isinstance(accepted, dict) and set(accepted) == {"fits", "after"}
    refused = summary["refused"]
    assert isinstance(refused, dict) and set(refused) == {"too-wide", "pinned-off-node"}
    assert "gpus" in refused["too-wide"] and "gpu_indices" in refused["pinned-off-node"]
    assert "refused too-wide (Resnet18, 8 GPUs): gpus" in run.stderr
    assert "submitted 2 of 4 jobs; refused 2:" in run.stderr
    assert "Traceback" not in run.stderr
    with daemon.client() as client:
        jobs = client.get("/v1/jobs").json()
    assert sorted(job["name"] for job in jobs) == ["after", "fits"]
    assert {job["state"] for job in jobs} == {"completed"}, "it waited for the accepted jobs"
