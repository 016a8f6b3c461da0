"""Logs are cut past the cap while a process still appends to them, and the tail reader
reaches across the cut."""

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from daemon import logcap
from daemon.joblogs import read_lines, tail_lines
from daemon.logcap import cap_logs, cap_logs_forever

WRITER = """
import sys, time
for line in range(int(sys.argv[1])):
    print(f"line {line} " + "x" * 40, flush=True)
sys.stdin.readline()
for line in range(int(sys.argv[1]), int(sys.argv[1]) + 3):
    print(f"line {line} " + "x" * 40, flush=True)
"""


def test_a_log_past_the_cap_is_cut_while_its_writer_goes_on(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    log = job_dir / "stdout.log"
    with log.open("ab") as out:  # as the launcher opens it: append mode
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, "200"], stdout=out, stdin=subprocess.PIPE
        )
    small = job_dir / "stderr.log"
    small.write_text("a short log\n")
    try:
        while log.stat().st_size < 200 * 49:
            pass
        _, offset_before = tail_lines(log, 5)
        assert cap_logs([job_dir], max_bytes=4096) == [log]
        assert writer.stdin is not None
        writer.stdin.write(b"go on\n")
        writer.stdin.flush()
        assert writer.wait(timeout=30) == 0
    finally:
        writer.kill()
        writer.wait()
        assert writer.stdin is not None
        writer.stdin.close()
    # Its newest 4,096 bytes are kept, not all it wrote (a fast writer's log would be
    # copied whole, hundreds of MB, each time).
    assert 4096 - 49 < (job_dir / "stdout.log.1").stat().st_size <= 4096
    kept = (job_dir / "stdout.log.1").read_text().splitlines()
    assert kept[-1].startswith("line 199 ") and not kept[0].startswith("line 0 ")
    assert kept[0].startswith("line "), "from a whole line, not a fragment"
    now = log.read_text().splitlines()
    assert [line.split()[1] for line in now] == ["200", "201", "202"], "no hole, no zeros"
    assert small.read_text() == "a short log\n" and not (job_dir / "stderr.log.1").exists()
    lines, _ = tail_lines(log, 5)
    assert [line.split()[1] for line in lines] == ["198", "199", "200", "201", "202"]
    followed = read_lines(log, offset_before).lines
    assert followed[0].startswith("line 200 "), "a follower starts the cut log from its start"


def test_a_job_s_logs_are_cut_once_more_after_it_left_the_watched_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a job printed last, between the last check and its processes' exit, is cut too.
    monkeypatch.setattr(logcap, "CHECK_S", 0.01)
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    running = [job_dir]

    async def scenario() -> None:
        capping = asyncio.create_task(cap_logs_forever(lambda: list(running), max_bytes=4096))
        await asyncio.sleep(0.05)  # watched, with nothing to cut
        (job_dir / "stdout.log").write_bytes((b"x" * 99 + b"\n") * 100)  # its last burst
        running.clear()  # it ended before the next check
        await asyncio.sleep(0.1)
        capping.cancel()

    asyncio.run(scenario())
    assert (job_dir / "stdout.log").stat().st_size == 0
    assert (job_dir / "stdout.log.1").stat().st_size == 4000  # 40 whole lines of 100
