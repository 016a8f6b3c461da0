"""A rank's log sink as a real process: each stream copied whole to its log as it comes,
both interleaved line by line, a line without its newline kept to the end, an endless
line cut, the job's signals ignored, its end the pipes' end."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from daemon.logsink import LONGEST_LINE
from daemon.sinks import SINK


def test_the_sink_copies_each_stream_and_interleaves_their_lines(tmp_path: Path) -> None:
    logs = [tmp_path / name for name in ("stdout.log", "stderr.log", "stdall.log")]
    files = [os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600) for path in logs]
    (out_read, out_write), (err_read, err_write) = os.pipe(), os.pipe()
    given = (out_read, err_read, *files)
    sink = subprocess.Popen(
        [sys.executable, "-S", "-E", str(SINK), *map(str, given)], pass_fds=given,
        start_new_session=True,
    )  # fmt: skip
    assert sink.wait(timeout=10) == 0  # it forked, and its child copies
    for descriptor in given:
        os.close(descriptor)
    os.write(out_write, b"one\ntwo, progress 1\r")
    time.sleep(0.2)
    os.write(err_write, b"oops\n")
    time.sleep(0.2)
    os.write(out_write, b"progress 2\nthree")  # its last line without a newline
    time.sleep(0.2)
    os.write(err_write, b"x" * (LONGEST_LINE + 10))
    os.close(out_write)
    os.close(err_write)
    deadline = time.monotonic() + 10
    while b"three" not in logs[2].read_bytes():
        assert time.monotonic() < deadline, logs[2].read_bytes()[:200]
        time.sleep(0.05)
    assert logs[0].read_bytes() == b"one\ntwo, progress 1\rprogress 2\nthree"
    assert logs[1].read_bytes() == b"oops\n" + b"x" * (LONGEST_LINE + 10)
    lines = logs[2].read_bytes().split(b"\n")
    # In the order they came (a carriage return ends a line: a progress bar's updates show
    # as they come); the endless line and the unfinished one close at the end, in whichever
    # order the two pipes closed.
    assert lines[:4] == [b"o one", b"o two, progress 1", b"e oops", b"o progress 2"]
    assert sorted(lines[4:]) == [b"", b"e " + b"x" * (LONGEST_LINE + 10), b"o three"]


def test_the_sink_outlives_the_jobs_signals(tmp_path: Path) -> None:
    log = tmp_path / "stdall.log"
    files = [os.open(tmp_path / n, os.O_WRONLY | os.O_CREAT, 0o600) for n in ("o", "e")]
    both = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    (out_read, out_write), (err_read, err_write) = os.pipe(), os.pipe()
    given = (out_read, err_read, *files, both)
    starter = subprocess.Popen(
        [sys.executable, "-S", "-E", str(SINK), *map(str, given)], pass_fds=given,
        start_new_session=True,
    )  # fmt: skip
    assert starter.wait(timeout=10) == 0
    for descriptor in given:
        os.close(descriptor)
    os.killpg(starter.pid, signal.SIGTERM)  # what a cancel sends the job's group, and more
    time.sleep(0.2)
    os.write(out_write, b"still here\n")
    os.close(out_write)
    os.close(err_write)
    deadline = time.monotonic() + 10
    while log.read_bytes() != b"o still here\n":
        assert time.monotonic() < deadline, log.read_bytes()
        time.sleep(0.05)
