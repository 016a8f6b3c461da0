import tomllib
from pathlib import Path

import pytest

from tests.integration.cli import stoker


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
