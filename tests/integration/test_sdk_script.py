"""A user's script on the SDK, run as users run it (`python train.py`), without a daemon:
Ctrl-C checkpoints at the next batch boundary and exits; run again, it goes on from there,
and every sample of every epoch is trained exactly once over both runs."""

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "scripts" / "count_train.py"
ROOT = Path(__file__).resolve().parents[2]


def run(workdir: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
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
    counts = collections.Counter(tuple(line.split()) for line in seen.read_text().splitlines())
    assert set(counts.values()) == {1}, "no sample trained twice"
    assert sorted(counts) == sorted((str(e), str(i)) for e in range(2) for i in range(96))
    checkpoints = sorted((tmp_path / "stoker-out" / "checkpoints").glob("checkpoint-*.pt"))
    assert len(checkpoints) == 2, "the newest two are kept"
    metrics = (tmp_path / "stoker-out" / "metrics.jsonl").read_text().splitlines()
    losses = [json.loads(line) for line in metrics]
    steps = [line["step"] for line in losses]
    assert steps == sorted(steps) and len(steps) == 24, "one loss per step, across both runs"
    assert losses[-1]["loss"] < losses[0]["loss"]
