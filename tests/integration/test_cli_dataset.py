"""`stoker dataset make`, and the rule that the daemon's side never loads torch."""

import re
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w
from PIL import Image

from cli.demo import REPO_WORKLOAD
from fpga_driver.loadgen import start_service, stop_service
from scheduler.config import DEFAULT_POLICY
from tests.integration.cli import stoker
from tests.integration.daemon_harness import free_port
from tpm.model import FittedTPM


def test_dataset_make_writes_jpegs_and_an_index(tmp_path: Path) -> None:
    run = stoker("dataset", "make", tmp_path / "data", "--images", "12", "--size", "40")
    assert run.code == 0, run.stderr
    files = sorted((tmp_path / "data").glob("*.jpg"))
    assert len(files) == 12
    with Image.open(files[0]) as image:
        assert image.format == "JPEG" and image.size == (40, 40)
    bad = stoker("dataset", "make", tmp_path / "none", "--images", "0")
    assert bad.code == 2 and "--images" in bad.stderr


def test_a_remote_store_is_made_said_emulated_and_refused_by_profile(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    run = stoker(
        "dataset", "make", remote, "--images", "4", "--size", "16", "--read-latency-ms", "20"
    )
    assert run.code == 0, run.stderr
    assert "an emulated remote store: every read waits 20 ms first" in run.stdout
    refused = stoker("profile", "--dataset", remote, "--out", tmp_path / "out")
    assert refused.code == 2 and "emulates a remote store" in refused.stderr
    assert "without --read-latency-ms" in refused.stderr and not (tmp_path / "out").exists()
    bad = stoker("dataset", "make", tmp_path / "bad", "--read-latency-ms", "-5")
    assert bad.code == 2 and "--read-latency-ms must be 0 to 10000 ms" in bad.stderr
    assert not (tmp_path / "bad").exists(), "nothing written"


def test_the_daemon_and_its_cli_never_import_torch() -> None:
    probe = (
        "import sys, cli, daemon.api, daemon.service; "
        "sys.exit(1 if {'torch', 'matplotlib'} & set(sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0


@pytest.mark.serial  # "a bigger batch takes longer", measured
def test_profile_writes_samples_that_tpm_fit_reads(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "profile"
    assert stoker("dataset", "make", data, "--images", "400", "--size", "40").code == 0
    run = stoker(
        "profile", "--dataset", data, "--out", out, "--models", "smVGG7,smResnet20",
        "--batch-sizes", "4,8,16,24", "--max-workers", "2",
    )  # fmt: skip
    assert run.code == 0, run.stderr
    training = (out / "training.csv").read_text().splitlines()
    loading = (out / "loading.csv").read_text().splitlines()
    assert training[0] == "batch_size,flops,model_params,gpus,step_time_s"
    assert loading[0] == "pipeline,batch_size,workers,load_rate"
    assert len(training) == 1 + 2 * 4 and len(loading) == 1 + 4 * 2
    steps = [float(row.split(",")[-1]) for row in training[1:5]]  # smVGG7, batch 4 .. 24
    assert steps[-1] > steps[0], "a bigger batch takes longer"
    fitted = stoker(
        "tpm", "fit", out / "training.csv", out / "loading.csv", "--out", out / "m.json"
    )
    assert fitted.code == 0, fitted.stderr
    too_small = stoker("profile", "--dataset", data, "--out", out, "--batch-sizes", "64,128")
    assert too_small.code == 2 and "--images" in too_small.stderr


def eighth_demo(tmp_path: Path) -> Path:
    """`make demo`'s own workload, its jobs an eighth as long and arriving four times as
    fast: the same four jobs, arrivals and completions that resize the running ones, an
    eighth of the training (the whole of it is `make demo`'s minute)."""
    workload = tomllib.loads(REPO_WORKLOAD.read_text())
    for job in workload["jobs"]:
        job["iterations"] = max(20, job["iterations"] // 8)
        job["arrival_s"] = job.get("arrival_s", 0.0) / 4
    path = tmp_path / "demo-quarter.toml"
    path.write_text(tomli_w.dumps(workload))
    return path


def test_the_demo_runs_real_jobs_through_a_live_daemon_and_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    # A user's shell settings for their own daemon are none of the demo's business.
    for name, value in {"PORT": "9", "TOKEN": "not-the-demos", "STATE_DIR": "/nowhere"}.items():
        monkeypatch.setenv(f"STOKER_{name}", value)
    run = stoker(
        "demo", "--workload", eighth_demo(tmp_path), "--state-dir", tmp_path / "demo",
        "--port", str(port), "--images", "64", timeout=240,
    )  # fmt: skip
    assert run.code == 0, run.stderr[-2000:]
    assert "resumed with" in run.stdout, "a running job was resized"
    assert f"dashboard: http://127.0.0.1:{port}/?token=" in run.stdout
    summary = run.stdout.split("summary")[1]
    assert summary.count("completed") == 4
    assert "daemon stopped" in run.stdout
    leftovers = subprocess.run(
        ["pgrep", "-f", str(tmp_path / "demo")], capture_output=True, check=False
    )
    assert leftovers.stdout == b"", "nothing of the demo is left running"


# Two short jobs, the second arriving while the first starts: a few steps each, as the
# comparison's table and its arithmetic are the point, not the training.
COMPARED = """
name = "two"
[node]
gpus = 2
cpu_workers = 3
max_jobs_per_gpu = 1
[[jobs]]
id = "first"
model = "smResnet20"
batch_size = 16
gpus = 1
iterations = 15
[[jobs]]
id = "second"
model = "smVGG7"
batch_size = 16
gpus = 1
iterations = 10
arrival_s = 1.0
"""


def test_the_demo_compares_balance_with_the_default_on_one_workload(tmp_path: Path) -> None:
    workload = tmp_path / "two.toml"
    workload.write_text(COMPARED)
    run = stoker(
        "demo", "--compare", "--workload", workload, "--state-dir", tmp_path / "demo",
        "--port", str(free_port()), "--images", "64", timeout=240,
    )  # fmt: skip
    assert run.code == 0, run.stderr[-2000:]
    assert "daemon up" in run.stdout and "(policy balance)" in run.stdout
    assert f"(policy {DEFAULT_POLICY})" in run.stdout
    for policy in ("balance", DEFAULT_POLICY):  # each run its own daemon and state
        assert (tmp_path / "demo" / policy / "state" / "stoker.db").exists()
    table = run.stdout.split("the same workload, one run each")[1]
    spans = {
        line.split()[0]: float(line.split()[1].rstrip("s"))
        for line in table.splitlines()
        if line.startswith("  ") and line.split()[0] in ("balance", DEFAULT_POLICY)
    }
    assert set(spans) == {"balance", DEFAULT_POLICY} and all(s > 0 for s in spans.values())
    said = re.search(rf"{DEFAULT_POLICY} against balance: ([-+][\d.]+)% in makespan", table)
    assert said is not None, table
    # The table rounds makespans to 0.1 s, so the gain it implies lies in an interval: a
    # few-second run moves it by points. The printed gain (itself rounded) must lie in it.
    base, ours, half = spans["balance"], spans[DEFAULT_POLICY], 0.05
    lowest, highest = (base - half) / (ours + half) - 1, (base + half) / (ours - half) - 1
    assert lowest - 0.0005 <= float(said.group(1)) / 100 <= highest + 0.0005, table
    assert run.stdout.count("summary") == 2 and run.stdout.count("completed") >= 4


@pytest.mark.serial  # each share's rate is measured over 2 s of wall time
def test_decoder_bench_prints_the_contract_json() -> None:
    run = stoker(
        "decoder", "bench", "--capacity", "1500", "--shares", "0.25,0.75",
        "--seconds", "2", "--json",
    )  # fmt: skip
    assert run.code == 0, run.stderr
    result = run.json()
    assert result["capacity"] == 1500 and result["seconds"] == 2
    clients = result["clients"]
    assert isinstance(clients, list) and [c["share"] for c in clients] == [0.25, 0.75]
    for client in clients:
        assert client["served_per_s"] == pytest.approx(client["share"] * 1500, rel=0.05)
    assert isinstance(result["device_cpu_s"], float) and "EMULATED" in str(result["device"])
    bad = stoker("decoder", "bench", "--shares", "0.5,1.5", "--seconds", "1")
    assert bad.code == 2 and "share" in bad.stderr


def test_profile_through_the_decoder_service_adds_the_device_pipeline(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "profile"
    assert stoker("dataset", "make", data, "--images", "240", "--size", "40").code == 0
    service = start_service(tmp_path / "decoder", capacity=20_000.0)
    try:
        run = stoker(
            "profile", "--dataset", data, "--out", out, "--models", "smVGG7,smResnet20",
            "--batch-sizes", "4,8,12,16", "--max-workers", "2",
            "--decoder-endpoint", f"ipc://{tmp_path / 'decoder' / 'decoder.sock'}",
        )  # fmt: skip
    finally:
        stop_service(service)
    assert run.code == 0, run.stderr
    rows = (out / "loading.csv").read_text().splitlines()[1:]
    assert [row.split(",")[0] for row in rows] == ["imagenet"] * 8 + ["imagenet+device"] * 8
    fitted = stoker(
        "tpm", "fit", out / "training.csv", out / "loading.csv", "--out", out / "m.json"
    )
    assert fitted.code == 0, fitted.stderr
    model = FittedTPM.from_json((out / "m.json").read_text(), "profiled")
    assert model.predict_sample_cost_s("imagenet+device") > 0


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_ctrl_c_or_kill_stops_the_demo_and_leaves_nothing_running(
    tmp_path: Path, stop: signal.Signals
) -> None:
    where = tmp_path / "demo"
    demo = subprocess.Popen(
        [sys.executable, "-m", "cli", "demo", "--state-dir", str(where),
         "--port", str(free_port()), "--images", "64"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert demo.stdout is not None
    seen = []
    for line in demo.stdout:  # until a job trains: the daemon and an agent are up
        seen.append(line)
        if ": running" in line:
            break
    assert any(line.startswith("dashboard: ") for line in seen), seen
    demo.send_signal(stop)
    try:
        rest, said = demo.communicate(timeout=120)
        assert demo.returncode == 0
        assert "daemon stopped" in rest
        assert "Traceback" not in said, said[-3000:]  # the submitter goes quietly too
        leftovers = subprocess.run(["pgrep", "-f", str(where)], capture_output=True, check=False)
        assert leftovers.stdout == b"", "nothing of the demo is left running"
    finally:  # what a failure left is not for the next test to meet
        subprocess.run(["pkill", "-f", str(where)], check=False)


def test_a_demo_whose_jobs_are_all_refused_says_so_and_no_more(tmp_path: Path) -> None:
    # 8 images: each job's batch is larger, so the daemon refuses them all (each said). The
    # demo's four jobs, arriving four times as fast: the demo waits out the last arrival
    # (20 s of its own workload's) before it can say that none completed.
    run = stoker(
        "demo", "--workload", eighth_demo(tmp_path), "--state-dir", tmp_path / "demo",
        "--port", str(free_port()), "--images", "8", timeout=120,
    )  # fmt: skip
    assert run.code == 2, run.stdout[-2000:] + run.stderr[-2000:]
    assert "refused" in run.stdout + run.stderr
    assert "no job of the workload completed" in run.stderr
    assert "Traceback" not in run.stderr
