"""Logs are cut past the cap while a process still appends to them, and the tail reader
reaches across the cut."""

import subprocess
import sys
from pathlib import Path

from daemon.joblogs import _read_from, tail_lines
from daemon.logcap import cap_logs

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
    kept = (job_dir / "stdout.log.1").read_text().splitlines()
    assert kept[0].startswith("line 0 ") and kept[-1].startswith("line 199 ")
    now = log.read_text().splitlines()
    assert [line.split()[1] for line in now] == ["200", "201", "202"], "no hole, no zeros"
    assert small.read_text() == "a short log\n" and not (job_dir / "stderr.log.1").exists()
    lines, _ = tail_lines(log, 5)
    assert [line.split()[1] for line in lines] == ["198", "199", "200", "201", "202"]
    followed, _ = _read_from(log, offset_before)
    assert followed[0].startswith("line 200 "), "a follower starts the cut log from its start"
