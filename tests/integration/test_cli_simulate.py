from pathlib import Path

from tests.integration.cli import REPO, stoker

STATIC = REPO / "configs" / "workloads" / "paper-static.toml"
CONTRACT = {
    "policy",
    "makespan_s",
    "throughput_samples_per_s",
    "avg_jct_s",
    "gpu_idle_fraction",
    "reallocations",
    "pause_overhead_s",
    "jobs",
}


def test_json_has_the_contract_fields() -> None:
    run = stoker("simulate", STATIC, "--policy", "waa", "--seed", "2", "--json")
    assert run.code == 0, run.stderr
    result = run.json()
    assert set(result) >= CONTRACT
    assert result["policy"] == "waa"
    jobs = result["jobs"]
    assert isinstance(jobs, list) and [j["id"] for j in jobs] == [
        "Resnet18",
        "mdResnet12",
        "smResnet20",
    ]
    for job in jobs:
        assert {"id", "start_s", "end_s", "avg_samples_per_s", "workers"} <= set(job)
        assert job["end_s"] > job["start_s"]
        assert all(len(step) == 2 for step in job["workers"])


def test_summary_and_timeline_for_people(tmp_path: Path) -> None:
    picture = tmp_path / "timeline.png"
    run = stoker("simulate", STATIC, "--policy", "oracle", "--timeline", picture)
    assert run.code == 0, run.stderr
    assert "paper-static under oracle" in run.stdout
    assert "makespan" in run.stdout and "smResnet20" in run.stdout
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_input_exits_2_naming_the_problem(tmp_path: Path) -> None:
    run = stoker("simulate", STATIC, "--policy", "fastest")
    assert run.code == 2 and "--policy" in run.stderr and "oracle" in run.stderr
    run = stoker("simulate", tmp_path / "nope.toml")
    assert run.code == 2 and "no such workload file" in run.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[[jobs]]\nid = "a"\nmodel = "Resnet18"\nbatch_size = 64\ngpus = 9\niterations = 10\n'
    )
    run = stoker("simulate", bad)
    assert run.code == 2 and "needs 9 GPUs" in run.stderr and str(bad) in run.stderr
    assert "Traceback" not in run.stderr
