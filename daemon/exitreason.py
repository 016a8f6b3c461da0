"""Why a job's processes ended, as its failure `reason` says it: the exit code or the
signal, the tail of stderr, and a hint where the tail shows a mistake the daemon can name."""

import re
import shutil
import signal
from collections.abc import Sequence
from pathlib import Path

from daemon.launcher import log_file

# The last line of a traceback for an import that found nothing.
_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")


def exit_reason(
    code: int | None,
    job_dir: Path,
    failures: Sequence[tuple[int, int]] = (),
    command: Sequence[str] = (),
    search_path: str | None = None,
) -> str:
    """Why a job's processes ended, for its `reason`: the exit code or the signal, and the
    last lines of stderr (an exception's traceback ends there); of each rank that failed by
    itself (`failures`, (rank, code)) when a rank other than 0 did, else of rank 0. A
    command job (`command`, looked up on `search_path`, the PATH it ran with) that could
    not import a module is told which interpreter ran it and how to choose another."""
    if any(rank != 0 for rank, _ in failures):
        why = "\n".join(
            _with_tail(f"rank {rank} {_ended(code)}", log_file(job_dir, "stderr", rank))
            for rank, code in failures
        )
    else:
        why = _with_tail(_ended(code), log_file(job_dir, "stderr", 0))
    hint = _missing_module_hint(why, command, search_path)
    return f"{why}\n{hint}" if hint else why


def _missing_module_hint(why: str, command: Sequence[str], search_path: str | None) -> str:
    """The usual cause of a script that cannot import what its author has installed: the
    daemon runs the command with its own PATH, and `python` there is another environment's
    (a daemon started before `source .venv/bin/activate`)."""
    missing = _MISSING_MODULE.findall(why)
    if not missing or not command:
        return ""
    program = command[0]
    found = shutil.which(program, path=search_path)
    ran = f"{found}, the `{program}` on the PATH the job ran with" if found else f"`{program}`"
    return (
        f"hint: {missing[-1]!r} cannot be imported by {ran}. Jobs run with the daemon's PATH: "
        "start `stoker serve` with the environment that has it active (e.g. after `source "
        ".venv/bin/activate`), or submit that environment's interpreter by its full path "
        "(`stoker submit -- /path/to/env/bin/python script.py`)"
    )  # no full stop: the scheduler may add "; not relaunched: ..."


def _ended(code: int | None) -> str:
    if code is None:
        return "its agent (started by an earlier daemon) ended without a word"
    if code < 0:
        return f"killed by signal {-code} ({_signal_name(-code)})"
    if code == 0:
        return "exited with code 0 before its final step"
    return f"exited with code {code}"


def _with_tail(why: str, stderr: Path) -> str:
    tail = _tail(stderr)
    return f"{why}; stderr ends:\n{tail}" if tail else why


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown"


def _tail(path: Path, lines: int = 10, limit: int = 2000) -> str:
    """The last `lines` non-empty lines of a log, at most `limit` characters."""
    try:
        with path.open("rb") as log:
            log.seek(max(0, path.stat().st_size - 8 * limit))
            text = log.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join(kept)[-limit:]
