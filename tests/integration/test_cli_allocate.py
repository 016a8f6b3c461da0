import json
from pathlib import Path
from typing import Any

import pytest

from allocator import POLICIES
from tests.integration.cli import REPO, stoker

PAPER_STATIC = REPO / "configs" / "requests" / "paper-static.json"


@pytest.mark.parametrize("policy", list(POLICIES))
def test_prints_the_contract_for_every_policy(policy: str) -> None:
    run = stoker("allocate", PAPER_STATIC, "--policy", policy)
    assert run.code == 0, run.stderr
    plan = run.json()
    assert plan["policy"] == policy
    allocations = plan["allocations"]
    assert isinstance(allocations, dict)
    assert list(allocations) == ["Resnet18", "mdResnet12", "smResnet20"]
    total = 0.0
    for allocation in allocations.values():
        assert set(allocation) == {
            "workers_per_gpu",
            "decoder_share",
            "decode_mode",
            "predicted_samples_per_s",
        }
        assert isinstance(allocation["workers_per_gpu"], int)
        assert allocation["workers_per_gpu"] >= 1
        assert allocation["decode_mode"] == "cpu"
        total += allocation["predicted_samples_per_s"]
    assert plan["predicted_total_samples_per_s"] == pytest.approx(total)
    processes = plan["loader_processes"]
    assert isinstance(processes, int)
    assert processes <= 18


def test_compare_shows_every_policy_side_by_side() -> None:
    run = stoker("allocate", PAPER_STATIC, "--compare")
    assert run.code == 0, run.stderr
    header = run.stdout.splitlines()[1]
    for policy in POLICIES:
        assert policy in header
    assert "vs balance" in run.stdout


def test_compare_says_what_each_measured_curve_was_fitted_as() -> None:
    run = stoker("allocate", REPO / "configs" / "requests" / "measured-curves.json", "--compare")
    assert run.code == 0, run.stderr
    fits = [line for line in run.stdout.splitlines() if "its profile fitted as" in line]
    assert [line.split(":")[0] for line in fits] == [
        "resnet18",
        "resnet50",
        "alexnet",
        "transformer",
    ]
    for line in fits:  # c, G and p, and how close the knee came to the points
        assert " s a sample a worker, G = " in line and ", p = " in line, line
        assert line.endswith(" of its 9 points"), line


def test_a_profile_that_is_not_a_table_is_told_its_shape(tmp_path: Path) -> None:
    request = paper_request()
    request["jobs"][0]["profile"] = [1, 2, 4]  # type: ignore[index]
    run = stoker("allocate", write(tmp_path, request))
    assert run.code == 2
    assert "jobs[0].profile: give a table of two lists" in run.stderr, run.stderr
    assert "workers_per_gpu = [1, 2, 4] and samples_per_s = [210, 400, 690]" in run.stderr
    assert "ProfileBody" not in run.stderr


def write(tmp_path: Path, payload: object) -> Path:
    path = tmp_path / "request.json"
    path.write_text(json.dumps(payload))
    return path


def paper_request() -> dict[str, object]:
    loaded = json.loads(PAPER_STATIC.read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_bad_field_names_the_field(tmp_path: Path) -> None:
    request = paper_request()
    request["jobs"][1]["sample_cost_s"] = -1  # type: ignore[index]
    run = stoker("allocate", write(tmp_path, request))
    assert run.code == 2
    assert "jobs[1].sample_cost_s" in run.stderr
    assert "greater than 0" in run.stderr
    assert "Traceback" not in run.stderr


def test_misspelt_field_is_refused(tmp_path: Path) -> None:
    request = paper_request()
    request["jobs"][0]["step_time"] = 0.1  # type: ignore[index]
    run = stoker("allocate", write(tmp_path, request))
    assert run.code == 2
    assert "jobs[0].step_time" in run.stderr


def test_missing_rates_without_a_tpm_say_what_to_give(tmp_path: Path) -> None:
    request = paper_request()
    del request["jobs"][2]["step_time_s"]  # type: ignore[index]
    run = stoker("allocate", write(tmp_path, request))
    assert run.code == 2
    assert "jobs[2].step_time_s" in run.stderr
    assert "--tpm" in run.stderr


def test_unknown_policy_lists_the_choices() -> None:
    run = stoker("allocate", PAPER_STATIC, "--policy", "fastest")
    assert run.code == 2
    assert "unknown policy 'fastest'" in run.stderr
    assert "optimal" in run.stderr


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("{not json", "not valid JSON at line 1"),
        ('{"node": {"cpu_workers": 4}}', "jobs: Field required"),
        (
            '{"node": {"cpu_workers": 4, "contention": [[2, 0.5], [1, 0.9]]}, "jobs": []}',
            "node.contention[1]",
        ),
    ],
)
def test_malformed_requests(tmp_path: Path, content: str, words: str) -> None:
    path = tmp_path / "request.json"
    path.write_text(content)
    run = stoker("allocate", path)
    assert run.code == 2
    assert words in run.stderr


def test_missing_file() -> None:
    run = stoker("allocate", "nowhere.json")
    assert run.code == 2
    assert "nowhere.json: no such request file" in run.stderr


def test_duplicate_job_ids(tmp_path: Path) -> None:
    request = paper_request()
    request["jobs"][1]["id"] = "Resnet18"  # type: ignore[index]
    run = stoker("allocate", write(tmp_path, request))
    assert run.code == 2
    assert "unique" in run.stderr


# Item 7's mix on a 2-CPU node mid-run: (id, step s, loader s per sample, workers, samples
# left, CPU s per sample), each job's CPU clocks measured.
CPU_MIX = [
    ("vgg11", 0.64, 0.0008, 1, 600.0, 0.0097),
    ("resnet18", 0.29, 0.00083, 1, 1200.0, 0.0047),
    ("decode-heavy", 0.06, 0.0146, 2, 1860.0, 0.007),
]


def cpu_node_request(core_share: float = 0.45) -> dict[str, Any]:
    jobs = [
        {
            "id": job_id,
            "gpus": 1,
            "batch_size": 32,
            "model_params": 1e6,
            "step_time_s": step,
            "sample_cost_s": cost,
            "current_workers_per_gpu": workers,
            "remaining_samples": left,
            "cpu_cost_s": cpu,
            "core_share": core_share,
        }
        for job_id, step, cost, workers, left, cpu in CPU_MIX
    ]
    return {"node": {"cpu_workers": 4, "cpu_cores": 2}, "regrow_delay_s": 2, "jobs": jobs}


def test_a_cpu_nodes_request_is_weighed_on_its_cores_and_says_so(tmp_path: Path) -> None:
    run = stoker("allocate", write(tmp_path, cpu_node_request()), "--policy", "lookahead")
    assert run.code == 0, run.stderr
    plan: dict[str, Any] = run.json()
    assert any("one budget of 2 CPUs" in note for note in plan["notes"]), plan["notes"]
    request = cpu_node_request()
    del request["node"]["cpu_cores"]  # the same jobs, loaders on CPUs of their own
    run = stoker("allocate", write(tmp_path, request), "--policy", "lookahead")
    gpu_node: dict[str, Any] = run.json()
    assert not any("budget" in note for note in gpu_node["notes"])
    # Sharing the cores, a split buys less over balance than the loaders-only model says.
    told = plan["balance_makespan_s"] / plan["predicted_makespan_s"]
    assert told < gpu_node["balance_makespan_s"] / gpu_node["predicted_makespan_s"]


def test_a_core_share_past_a_core_names_the_field(tmp_path: Path) -> None:
    run = stoker("allocate", write(tmp_path, cpu_node_request(core_share=1.5)))
    assert run.code == 2
    assert "jobs[0].core_share" in run.stderr and "Traceback" not in run.stderr
