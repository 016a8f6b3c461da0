"""A user's script on the SDK, run as users run it (`python train.py`): alone, Ctrl-C
checkpoints at the next batch boundary and a second run goes on from there; under a daemon
(here its end of the protocol by hand, over real ZeroMQ), it pauses, is resized live and
finishes, or is cancelled. Every sample of every epoch is trained exactly once."""

import collections
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.protocol import (
    VERSION,
    CancelMessage,
    FinishedMessage,
    HeartbeatMessage,
    Hello,
    MetricsMessage,
    PausedMessage,
    PauseMessage,
    ResumedMessage,
    ResumeMessage,
    read_last_step_marker,
)
from bench.agent_driver import Router

SCRIPT = Path(__file__).resolve().parent / "scripts" / "count_train.py"
ROOT = Path(__file__).resolve().parents[2]


def run(workdir: Path, *args: str, **stoker: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **stoker}
    if not stoker:
        env.pop("STOKER_JOB_ID", None)
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), *args],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_ctrl_c_checkpoints_and_a_second_run_finishes_the_rest_exactly_once(
    tmp_path: Path,
) -> None:
    seen = tmp_path / "stoker-out" / "seen.txt"
    first = run(tmp_path, "2", "0.05")
    deadline = time.monotonic() + 60
    while not (seen.exists() and len(seen.read_text().splitlines()) >= 40):
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "the script never trained"
        time.sleep(0.05)
    first.send_signal(signal.SIGINT)
    _, stderr = first.communicate(timeout=60)
    assert first.returncode == 128 + signal.SIGINT, stderr
    assert "checkpoint" in stderr and "Traceback" not in stderr
    trained_first = len(seen.read_text().splitlines())
    assert 40 <= trained_first < 192

    second = run(tmp_path, "2", "0")
    stdout, stderr = second.communicate(timeout=120)
    assert second.returncode == 0, stderr
    assert "resumed True" in stdout
    exactly_once(seen, 2)
    checkpoints = sorted((tmp_path / "stoker-out" / "checkpoints").glob("checkpoint-*.pt"))
    assert len(checkpoints) == 2, "the newest two are kept"
    metrics = (tmp_path / "stoker-out" / "metrics.jsonl").read_text().splitlines()
    *losses, final = [json.loads(line) for line in metrics]
    steps = [line["step"] for line in losses]
    assert steps == sorted(steps) and len(steps) == 24, "one loss per step, across both runs"
    assert losses[-1]["loss"] < losses[0]["loss"]
    assert final.keys() == {"step", "final_loss"} and final["step"] == 24, "after training"


def test_a_signal_after_training_ends_the_script_and_keeps_what_it_reported(
    tmp_path: Path,
) -> None:
    # No batch boundary comes after epochs(): a SIGTERM there (the daemon stopping a script
    # that runs on too long after training, or Ctrl-C) must end it, not wait for one.
    process = run(tmp_path, "1", "0", EVAL_S="60")
    checkpoints = tmp_path / "stoker-out" / "checkpoints"
    deadline = time.monotonic() + 60
    while not (checkpoints.exists() and any(checkpoints.glob("checkpoint-*.pt"))):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the script never finished training"
        time.sleep(0.05)
    assert process.stdout is not None
    while not (said := process.stdout.readline()).startswith("saving for"):
        assert said, process.communicate()  # its evaluation: training is over, it sleeps
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=20)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    last = json.loads((tmp_path / "stoker-out" / "metrics.jsonl").read_text().splitlines()[-1])
    assert set(last) == {"step", "final_loss"}, "reported after training, kept at exit"


def test_a_script_that_raises_keeps_every_loss_it_reported(tmp_path: Path) -> None:
    crashed = run(tmp_path, "2", "0", "0", "96", "5")
    _, stderr = crashed.communicate(timeout=120)
    assert crashed.returncode == 1 and "RuntimeError: a bug at step 5" in stderr, stderr
    metrics = (tmp_path / "stoker-out" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in metrics] == [1, 2, 3, 4, 5]


def exactly_once(seen: Path, epochs: int) -> None:
    counts = collections.Counter(tuple(line.split()) for line in seen.read_text().splitlines())
    assert set(counts.values()) == {1}, "no sample trained twice"
    assert sorted(counts) == sorted((str(e), str(i)) for e in range(epochs) for i in range(96))


@pytest.fixture
def router(tmp_path: Path) -> Iterator[Router]:
    made = Router(tmp_path / "agents.sock")
    yield made
    made.close()


def under_a_daemon(
    tmp_path: Path, router: Router, *args: str, heartbeat_s: str = "0.1"
) -> subprocess.Popen[str]:
    return run(
        tmp_path,
        *args,
        STOKER_JOB_ID="job",
        STOKER_CONTROL=router.endpoint,
        STOKER_GEN="1",
        STOKER_WORKERS="1",
        STOKER_HEARTBEAT_S=heartbeat_s,
        STOKER_PROTOCOL=str(VERSION),
        STOKER_OUTPUT_DIR=str(tmp_path / "out"),
        STOKER_JOB_DIR=str(tmp_path / "job"),
    )


def test_under_a_daemon_the_script_pauses_is_resized_live_and_finishes(
    tmp_path: Path, router: Router
) -> None:
    process = under_a_daemon(tmp_path, router, "2", "0.02")
    hello = router.expect(Hello)
    assert (hello.state, hello.workers, hello.gen, hello.iteration) == ("running", 1, 1, 0)
    beat = router.expect(HeartbeatMessage)
    assert beat.workers == 1 and beat.step_s > 0 and beat.samples == 8 * beat.iteration
    router.send("job", PauseMessage(job="job", gen=2))
    paused = router.expect(PausedMessage)
    assert paused.gen == 2 and paused.iteration >= beat.iteration
    assert Path(paused.checkpoint).is_file()
    assert process.poll() is None, "a hot pause keeps the process"
    router.send("job", ResumeMessage(job="job", gen=2, workers_per_gpu=2))
    resumed = router.expect(ResumedMessage)
    assert (resumed.gen, resumed.workers) == (2, 2) and resumed.gap_s >= 0
    assert router.expect(HeartbeatMessage).workers == 2
    finished = router.expect(FinishedMessage)
    assert finished.iteration == 24
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    exactly_once(tmp_path / "out" / "seen.txt", 2)
    assert json.loads((tmp_path / "job" / "finished.json").read_text()) == {"iteration": 24}


def test_under_a_daemon_a_cancel_checkpoints_and_exits_cleanly(
    tmp_path: Path, router: Router
) -> None:
    process = under_a_daemon(tmp_path, router, "50", "0.02")
    router.expect(HeartbeatMessage)
    router.send("job", CancelMessage(job="job"))
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    kept = sorted((tmp_path / "out" / "checkpoints").glob("checkpoint-*.pt"))
    assert kept, "the cancelled job keeps its checkpoint"
    assert not (tmp_path / "job" / "finished.json").exists()


def test_under_a_daemon_a_script_that_raises_says_the_step_it_reached(
    tmp_path: Path, router: Router
) -> None:
    # Its heartbeats come every second at most, so a crash in the first one would otherwise
    # read as a job that failed before its first step, and its losses would be lost.
    process = under_a_daemon(tmp_path, router, "2", "0", "0", "96", "5", heartbeat_s="30")
    router.expect(Hello)
    metrics = router.expect(MetricsMessage)
    assert [point.step for point in metrics.points] == [1, 2, 3, 4, 5]
    last = router.expect(HeartbeatMessage)
    assert last.last and last.iteration == 4, "step 5 raised: 4 steps were completed"
    assert last.samples_per_s == 0.0
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1 and "a bug at step 5" in stderr
    assert read_last_step_marker(tmp_path / "job") == 4, "for a daemon that reads its exit first"


def test_a_script_that_raises_after_an_epochs_last_batch_completed_that_step(
    tmp_path: Path, router: Router
) -> None:
    # 96 samples in batches of 8: the epoch's 12th step is done when the script's own end
    # of the epoch (its evaluation, say) raises.
    process = under_a_daemon(tmp_path, router, "2", "0", "0", "96", "12", "epoch-end")
    last = router.expect(HeartbeatMessage)
    while not last.last:
        last = router.expect(HeartbeatMessage)
    assert last.iteration == 12, "the step whose batch was the epoch's last is completed"
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1 and "a bug at the end of epoch 0" in stderr
    assert read_last_step_marker(tmp_path / "job") == 12
