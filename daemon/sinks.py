"""The launcher's side of a rank's log sink (daemon/logsink.py, the process that copies a
rank's stdout and stderr to their logs and, interleaved in time order, to stdall.log):
starting one, and knowing when it has copied everything."""

import logging
import os
import select
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

SINK = Path(__file__).with_name("logsink.py")
SINK_START_S = 10.0  # a log sink forks within this (a Python start: tens of ms)
SINK_DRAIN_S = 2.0  # a job's exit waits this long at most for its sinks' last copies
# The interleaved log's tags: what each line of stdall.log begins with (daemon/logsink.py).
STDOUT_TAG, STDERR_TAG = "o ", "e "
# What the interleaved log says of a start whose output only the stream logs hold.
NO_SINK_MARK = "----- stoker: no log sink for this start: see stdout.log and stderr.log"


def start_sink(given: tuple[int, int, int, int, int]) -> int | None:
    """Start a rank's log sink on `given` (its stdout and stderr pipes' read ends, its
    stdout, stderr and interleaved logs); the read end of the pipe it holds until it is
    done, or None when it could not start (said in the daemon's log)."""
    done_read, done_write = os.pipe()
    try:
        starter = subprocess.Popen(
            [sys.executable, "-S", "-E", str(SINK), *map(str, given), str(done_write)],
            pass_fds=(*given, done_write),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # nothing of the daemon's output held open by it
            start_new_session=True,  # the job's signals are not its
        )
    except OSError as error:
        log.warning("no log sink (%s): a job's logs are not interleaved", error)
        os.close(done_read)
        return None
    finally:
        os.close(done_write)
    try:
        code = starter.wait(timeout=SINK_START_S)  # it forks, and leaves its child at work
    except subprocess.TimeoutExpired:
        starter.kill()
        starter.wait()
        code = None
    if code != 0:
        log.warning("no log sink (its start ended with %s): a job's logs are not interleaved", code)
        os.close(done_read)
        return None
    return done_read


def at_end(descriptor: int) -> bool:
    """Whether a pipe nobody writes to has reached its end (its last writer is gone)."""
    readable, _, _ = select.select([descriptor], [], [], 0)
    return bool(readable) and not os.read(descriptor, 1)


class Sinks:
    """The pipes each job's log sinks hold open until they have copied the last of their
    rank's output."""

    def __init__(self) -> None:
        self._done: dict[str, list[int]] = {}
        self._since: dict[str, float] = {}  # job -> when its exit was first looked at

    def add(self, job_id: str, done: int) -> None:
        self._done.setdefault(job_id, []).append(done)

    def drained(self, job_id: str) -> bool:
        """Whether the sinks of a job whose processes have all exited copied the last of
        their output (a failure's traceback, which its reason quotes): at once, mostly;
        `SINK_DRAIN_S` at most after the first look, for output that a process the job left
        behind still holds open."""
        waiting = [done for done in self._done.get(job_id, []) if not at_end(done)]
        first = self._since.setdefault(job_id, time.monotonic())
        if waiting and time.monotonic() - first < SINK_DRAIN_S:
            return False
        for done in self._done.pop(job_id, []):
            os.close(done)
        self._since.pop(job_id, None)
        return True
