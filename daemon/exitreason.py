"""Why a job's processes ended, as its failure `reason` says it: the exit code or the
signal, the tail of stderr, and a hint where the tail shows a mistake the daemon can name."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Collection, Sequence
from pathlib import Path

from agents.protocol import read_stop_signal
from daemon.agentargs import PATH_FIX
from daemon.jobfiles import open_checked, read_end
from daemon.launcher import AGAIN_MARK, log_file
from daemon.spawn import WorkdirError
from daemon.tenants import UnixUser

# The last line of a traceback for an import that found nothing.
_TRACEBACK = "Traceback (most recent call last):"
_TRACEBACK_LINES = 30  # a longer one is cut to its last `lines`, where the error is
_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")
# What comes before a rank's stderr tail in a reason: a client that has just shown that
# stderr may leave the tail out (`stoker submit --follow`).
STDERR_ENDS = "; stderr ends:"
# Python told to run a script that is not there: `python train.py` in another folder.
_MISSING_SCRIPT = re.compile(r".*: can't open file '(.+)': \[Errno 2\] No such file or directory")
# A script reading a variable its environment lacks: `os.environ["DATA_DIR"]`.
_MISSING_VARIABLE = re.compile(r"KeyError: '([A-Za-z_][A-Za-z0-9_]*)'")


def exit_reason(
    code: int | None,
    job_dir: Path,
    failures: Sequence[tuple[int, int]] = (),
    *,
    command: Sequence[str] = (),
    search_path: str | None = None,
    variables: Collection[str] = (),
    workdir: str | None = None,
) -> str:
    """Why a job's processes ended, for its `reason`: the exit code or the signal, and the
    last lines of stderr (an exception's traceback ends there); of each rank that failed by
    itself (`failures`, (rank, code)) when a rank other than 0 did, else of rank 0. A
    command job run by a bare `python...` name (`command`, looked up on `search_path`, the
    PATH it ran with) whose stderr ends on an import that found nothing is told which
    interpreter that name finds and how to choose another; one whose stderr ends on a
    `KeyError` of `os.environ` for a name not among its `variables` is told that a job
    gets no variable of the submitting shell's; one whose Python could not open its script
    is told the folder it ran in (`workdir`). An exit 0 says the stop signal the script
    had caught, as its SDK's last-step marker tells."""
    if any(rank != 0 for rank, _ in failures):
        ranks = [(f"rank {rank} {_ended(code)}", rank) for rank, code in failures]
    else:
        caught = read_stop_signal(job_dir) if code == 0 else None
        ranks = [(_ended(code, caught), 0)]
    ended = [(what, _tail(log_file(job_dir, "stderr", rank))) for what, rank in ranks]
    why = "\n".join(f"{what}{STDERR_ENDS}\n{tail}" if tail else what for what, tail in ended)
    missing = [module for _, tail in ended if (module := _missing_module(tail))]
    hint = _interpreter_hint(missing[0], command, search_path) if missing else ""
    if not hint and command:
        unset = [name for _, tail in ended if (name := _missing_variable(tail, variables))]
        hint = _environment_hint(unset[0]) if unset else ""
    if not hint and workdir is not None:
        scripts = [found.group(1) for _, tail in ended if (found := _MISSING_SCRIPT.search(tail))]
        hint = _script_hint(scripts[0], workdir) if scripts else ""
    return f"{why}\n{hint}" if hint else why


def launch_failure(
    error: OSError,
    command: Sequence[str],
    search_path: str | None,
    workdir: str | None = None,
    user: UnixUser | None = None,
) -> str:
    """Why a command job's processes could not be started, for its `reason`: the program the
    launch could not execute, where it was looked for (`workdir`: the folder it ran in),
    and the fix. What is looked at in the job's folders is looked at as its `user` (None:
    the daemon's): a reason tells a tenant nothing its user may not see (issue 37, 8)."""
    program = command[0] if command else ""
    if error.filename != program:  # not the program: its workdir, a log file, ...
        return _not_the_program(error)
    if isinstance(error, FileNotFoundError) and os.sep not in program:
        return (
            f"launch failed: {program!r} is not on the job's PATH ({search_path or ''}); "
            f"{PATH_FIX} (a job's PATH is the daemon's unless its env sets PATH)"
        )
    if isinstance(error, FileNotFoundError):
        return _not_found(program, workdir, user)
    if isinstance(error, PermissionError):
        closed = _closed_folder(program, search_path)
        if closed is not None:  # the usual cause under `unix_users`: an env in root's home
            found, folder, mode = closed
            return (
                f"launch failed: the job's user may not execute {program!r}"
                f" ({error.strerror}): it is {found}, and {folder} (mode {mode:04o}) lets"
                " no other user through; install what the job runs where its user can"
                " reach it, or submit an interpreter it may run by its full path"
            )
        return (
            f"launch failed: the job's user may not execute {program!r} ({error.strerror}); "
            "a script without its executable bit runs as `python script.py`"
        )
    return f"launch failed: {error}"


def _not_the_program(error: OSError) -> str:
    """A launch that failed before it came to the program: its workdir, a log file, ..."""
    if isinstance(error, WorkdirError):
        return (
            f"launch failed: the job's user cannot enter its workdir {error.filename}"
            f" ({error.strerror}); give a folder that user may enter"
        )
    where = f": {error.filename}" if error.filename is not None else ""
    return f"launch failed: {error.strerror or error}{where}"


def _closed_folder(program: str, search_path: str | None) -> tuple[str, Path, int] | None:
    """`closed_on_the_way` for a bare name found on the daemon's own PATH (the operator's,
    as `unstartable` looks); None when the daemon does not look."""
    ours = os.sep not in program and search_path == os.environ.get("PATH")
    found = shutil.which(program, path=search_path) if ours else None
    real = os.path.realpath(found) if found is not None else ""
    # Not executable at all: the folders are not the cause.
    if found is None or not os.access(real, os.F_OK) or not os.stat(real).st_mode & 0o111:
        return None
    return closed_on_the_way(found)


def closed_on_the_way(program: str) -> tuple[str, Path, int] | None:
    """`program` as found (a link: and what it points to), the first folder on the way to
    it, or to what it links to, that others may not pass (no o+x), and its mode; None when
    every folder lets others through. Only for a path the daemon chose or looked up on its
    own PATH: a tenant's would let it probe the node's folders as root."""
    real = os.path.realpath(program)
    shown = program if real == os.path.abspath(program) else f"{program} -> {real}"
    for path in (Path(os.path.abspath(program)), Path(real)):
        for folder in reversed(path.parents):
            mode = folder.stat().st_mode & 0o7777  # reached: the daemon found the program
            if not mode & 0o001:
                return shown, folder, mode
    return None


def zoo_launch_failure(error: OSError, interpreter: str) -> str | None:
    """Why a zoo job's process, which runs the daemon's own interpreter, could not start
    as its tenant's user: a folder on the way to the interpreter closed to others (a
    virtual environment in root's home); None for any other failure."""
    if not isinstance(error, PermissionError) or error.filename != interpreter:
        return None
    closed = closed_on_the_way(interpreter)
    if closed is None:
        return None
    shown, folder, mode = closed
    return (
        f"launch failed: the job's user may not execute the daemon's Python, {shown}"
        f" ({error.strerror}): {folder} (mode {mode:04o}) lets no other user through. A zoo"
        " job runs the daemon's own interpreter: install stoker where every user may pass"
        " (/opt/stoker, `make install` there), or submit the model as a command job with an"
        " interpreter the user may run"
    )


def _not_found(program: str, workdir: str | None, user: UnixUser | None) -> str:
    """A program given by its path that could not be executed: it is not there, or what its
    `#!` line names is not (as `user` sees it)."""
    found = Path(workdir or "", program)
    there, shebang = _look(found) if user is None else _look_as(user, found)
    if there:
        return (
            f"launch failed: {program!r} is there, but the interpreter its first line (#!)"
            f" names is not: {shebang!r}; fix that line, or run it as"
            " `python script.py`"
        )
    if os.path.isabs(program):
        return f"launch failed: {program!r} does not exist; give the path of a file on the node"
    folder = workdir or "the job's workdir"
    return (
        f"launch failed: {program!r} does not exist in {folder}, where the job runs; "
        "give its path from there (or an absolute one), or submit from its folder"
    )


def _look(script: Path) -> tuple[bool, str]:
    """Whether `script` is a file, and what its `#!` line names, as the daemon sees them."""
    return (True, _shebang(script)) if script.is_file() else (False, "")


# `_look` as a tenant's user: the daemon's interpreter, isolated, that becomes the user
# before it looks (a plain file only: a FIFO would hold it, O_NONBLOCK opens it at once).
_LOOK_AS = """import json, os, stat, sys
os.setgroups([]); os.setgid(int(sys.argv[2])); os.setuid(int(sys.argv[1]))
try:
    fd = os.open(sys.argv[3], os.O_RDONLY | os.O_NONBLOCK)
except OSError:
    print(json.dumps([False, ""])); sys.exit()
if not stat.S_ISREG(os.fstat(fd).st_mode):
    print(json.dumps([False, ""])); sys.exit()
first = (os.read(fd, 256).splitlines() or [b""])[0].decode(errors="replace").strip()
print(json.dumps([True, first[2:].strip() if first.startswith("#!") else ""]))
"""


def _look_as(user: UnixUser, script: Path) -> tuple[bool, str]:
    """`_look` done by a short-lived process that first becomes `user`: a file of another
    user's, reached through a link or a folder the tenant's user may not enter, is neither
    confirmed nor read. (False, "") when it cannot tell."""
    argv = [sys.executable, "-I", "-S", "-c", _LOOK_AS, str(user.uid), str(user.gid), str(script)]
    try:
        done = subprocess.run(argv, env={}, capture_output=True, timeout=10.0, check=True)
        there, shebang = json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return False, ""
    return bool(there), str(shebang)


def _shebang(script: Path) -> str:
    """What the first line of `script` names to run it, or "" without a `#!` line (or
    when it is not a plain file: the daemon reads nothing of the job's folder through a
    link or from a FIFO, daemon/jobfiles.py)."""
    try:
        with os.fdopen(open_checked(script, os.O_RDONLY), "rb") as handle:
            first = handle.readline(256).decode(errors="replace").strip()
    except OSError:
        return ""
    return first[2:].strip() if first.startswith("#!") else ""


def _missing_module(tail: str) -> str | None:
    """The module a traceback ends on failing to import, if it does (an earlier warning
    that names one does not count)."""
    last = tail.rsplit("\n", 1)[-1]
    matched = _MISSING_MODULE.fullmatch(last.strip())
    return matched.group(1) if matched else None


def _missing_variable(tail: str, variables: Collection[str]) -> str | None:
    """The variable a traceback ends on failing to find in `os.environ`, if it does and the
    job's environment (`variables`) lacks it."""
    last = tail.rsplit("\n", 1)[-1]
    matched = _MISSING_VARIABLE.fullmatch(last.strip())
    if matched is None or "environ" not in tail or matched.group(1) in variables:
        return None
    return matched.group(1)


def _script_hint(script: str, workdir: str) -> str:
    """A script named by a path that is not there from the folder the job ran in."""
    return (
        f"hint: {script} does not exist. The job ran in {workdir}: a job file's `workdir`,"
        " else the job file's own folder; a command's, the folder it was submitted from."
        " Give the script's path from there, or set `workdir`"
    )


def _environment_hint(name: str) -> str:
    """A variable set in the shell that submitted the job is not the job's."""
    return (
        f"hint: {name!r} is not in the job's environment. A job gets the variables its"
        " submit gives (`stoker submit --env NAME=VALUE`, or `env` in its job file) and"
        " stoker's own, none of the submitting shell's"
    )  # no full stop: the reason may go on after it


def _interpreter_hint(module: str, command: Sequence[str], search_path: str | None) -> str:
    """The usual cause of a script that cannot import what its author installed: `python`
    found on another environment's PATH (a daemon started before `source
    .venv/bin/activate`). Only for a bare `python...` name: a full path was the user's
    choice, and `bash run.sh` says nothing of which python ran."""
    program = command[0] if command else ""
    if os.sep in program or not program.startswith("python"):
        return ""
    found = shutil.which(program, path=search_path)
    ran = f"{found}, the `{program}` on the job's PATH" if found else f"`{program}`"
    return (
        f"hint: {module!r} cannot be imported by {ran}. A job's PATH is the daemon's unless "
        "its env sets PATH: start `stoker serve` with the environment that has it active "
        "(e.g. after `source .venv/bin/activate`), or submit that environment's interpreter "
        "by its full path (`stoker submit -- /path/to/env/bin/python script.py`)"
    )  # no full stop: the reason may go on after it


def _ended(code: int | None, caught: int | None = None) -> str:
    if code is None:
        return "its agent (started by an earlier daemon) ended without a word"
    if code < 0:
        return f"killed by signal {-code} ({_signal_name(-code)})"
    if code == 0 and caught is not None:  # the daemon stops its jobs over their link
        return (
            f"exited with code 0 before its final step, after a {_signal_name(caught)} from"
            " outside stoker"
        )
    if code == 0:
        return "exited with code 0 before its final step"
    return f"exited with code {code}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown"


def _tail(path: Path, lines: int = 10, limit: int = 2000) -> str:
    """The end of the last process's output in a log (after the launcher's last "started
    again" line), at most `limit` characters: from its last traceback's first line when
    one ends within `_TRACEBACK_LINES`, else its last `lines` non-empty lines."""
    data, _ = read_end(path, 8 * limit)  # empty when missing, unsafe or unreadable
    text = data.decode("utf-8", errors="replace")
    kept = [line for line in text.splitlines() if line.strip()]
    starts = [i for i, line in enumerate(kept) if line.startswith(AGAIN_MARK)]
    if starts:
        kept = kept[starts[-1] + 1 :]
    traceback = [i for i, line in enumerate(kept) if line.startswith(_TRACEBACK)]
    if traceback and len(kept) - traceback[-1] <= _TRACEBACK_LINES:
        kept = kept[traceback[-1] :]
    else:
        kept = kept[-lines:]
    return "\n".join(kept)[-limit:]
