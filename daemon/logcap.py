"""Jobs' logs stay within a size: each rank's stdout, stderr and interleaved (stdall) file
is cut when it passes `job_log_max_bytes`, logrotate's `copytruncate` way.

The processes write their logs through file descriptors the launcher opened in append mode,
so the daemon cannot swap the files under them; it copies the last `job_log_max_bytes` of a
file that grew past the cap to `<name>.1` (replacing the older copy) and truncates the
original to 0, where the next write lands. A job's logs take at most twice the cap per
stream and rank, plus what a job writes between two checks (a second apart): a job writing
a hundred MB a second overshoots by that, not by all it wrote. Lines written between the
copy and the truncation (microseconds) are lost, as with logrotate; so is what a log held
before its last `job_log_max_bytes` when it is cut.

A job's logs are checked while it runs, while its processes exit after its end (a script
printing through its evaluation), and once more after they have.
"""

import asyncio
import logging
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from daemon.jobfiles import open_checked

log = logging.getLogger(__name__)

LOG_GLOB = "std*.log"  # stdout.log, stderr.log, stdall.log, stdout.rank1.log, ...
_LINE_MAX = 64 * 2**10  # a line longer than this is cut where the copy starts
CHECK_S = 1.0  # logs are measured this often: a few stat calls a job


async def cap_logs_forever(job_dirs: Callable[[], list[Path]], max_bytes: int) -> None:
    """Every CHECK_S, cut the logs of `job_dirs()` past `max_bytes`, in a thread; a folder
    that has left `job_dirs()` since the last check (its job's processes exited) once
    more, for what they wrote last."""
    watched: set[Path] = set()
    while True:
        await asyncio.sleep(CHECK_S)
        now = set(job_dirs())
        await asyncio.to_thread(cap_logs, sorted(now | watched), max_bytes)
        watched = now


def cap_logs(job_dirs: Iterable[Path], max_bytes: int) -> list[Path]:
    """Cut every log in `job_dirs` that is over `max_bytes`; the logs cut."""
    cut: list[Path] = []
    for job_dir in job_dirs:
        for path in job_dir.glob(LOG_GLOB):
            kept = path.with_name(path.name + ".1")
            try:
                if not _cut(path, kept, max_bytes):
                    continue
            except OSError as error:  # a job's directory is not worth the daemon
                log.warning("%s: log not cut: %s", path, error)
                continue
            log.info("%s: over %d bytes; kept as %s and started afresh", path, max_bytes, kept)
            cut.append(path)
    return cut


def _cut(path: Path, kept: Path, max_bytes: int) -> bool:
    """Copy the end of `path` (`max_bytes`, or what has been written since) to `kept` and
    empty it, if it is over `max_bytes`; whether it was. Both
    are opened as jobfiles opens a job's files (no links, no FIFOs), the copy emptied only
    once it is known to be a plain file of its own."""
    source = open_checked(path, os.O_RDWR)
    with os.fdopen(source, "r+b") as log_file:
        owner = os.fstat(source)
        if owner.st_size <= max_bytes:
            return False
        made = open_checked(kept, os.O_WRONLY | os.O_CREAT, {owner.st_uid, os.geteuid()})
        with os.fdopen(made, "wb") as copy:
            os.fchown(made, owner.st_uid, owner.st_gid)  # the job's, as the log is
            copy.truncate(0)
            log_file.seek(owner.st_size - max_bytes)  # its newest lines: a cap's worth,
            log_file.readline(_LINE_MAX)  # from the first whole one (not a sparse GB of none)
            shutil.copyfileobj(log_file, copy)
        os.ftruncate(source, 0)
    return True
