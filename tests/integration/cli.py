"""Run the `stoker` command line as a user would, and see what it printed and how it exited.

A command runs in this process, through the app the `stoker` console script runs (`cli:app`,
pyproject.toml): a fresh interpreter and its imports cost more CPU than most commands. As the
console script, it runs in the given folder, with this process's environment and an empty
stdin; its stdout and stderr are kept apart; `sys.exit(n)` is code n, and an uncaught
exception is code 1 with typer's traceback on stderr. Warnings and logging are as in a fresh
interpreter (Python's default filters, not pytest's "error"), and what the command did to the
logging setup is undone after it.

The commands that start a long-lived process, or answer signals, run the console script in a
subprocess (IN_A_PROCESS): a daemon (`serve`, `node`, `agent`), the decoder service, the demo;
so does a call from a thread beside the test's own. `stoker serve --help` (test_service_unit.py)
keeps the console script covered; test_cli_inprocess.py compares it with the app here.
"""

import gc
import json
import logging
import os
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import TextIO

import typer
from typer.testing import CliRunner

STOKER = Path(sys.executable).parent / "stoker"
REPO = Path(__file__).resolve().parents[2]

# Commands (their first words) that outlive a call or install signal handlers: in a thread of
# this process a daemon would never stop and signal.signal refuses to run.
IN_A_PROCESS = (("serve",), ("node",), ("agent",), ("demo",), ("decoder", "serve"))

ALL_IN_A_PROCESS = "TESTS_STOKER_IN_SUBPROCESS"  # set (to 1): every command, to compare or debug
_HUNG: list[threading.Thread] = []  # in-process calls past their timeout


@dataclass(frozen=True)
class Run:
    """What one command printed and how it exited."""

    code: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, object]:
        payload = json.loads(self.stdout)
        assert isinstance(payload, dict)
        return payload


def stoker(*args: str | Path, cwd: Path | None = None, timeout: float = 60) -> Run:
    """`stoker ARGS...` in `cwd` (the repository by default); a hang fails the test instead of
    CI: a subprocess is killed after `timeout` seconds, an in-process call is left behind."""
    words = [str(arg) for arg in args]
    if any(tuple(words[: len(first)]) == first for first in IN_A_PROCESS):
        return in_a_subprocess(words, cwd=cwd, timeout=timeout)
    # A call sets this process's streams, folder and filters: one at a time, from the test's
    # own thread. A call from another thread (a command run beside the test), or after a hung
    # call still running, runs the console script.
    beside = threading.current_thread() is not threading.main_thread()
    if beside or any(thread.is_alive() for thread in _HUNG) or os.environ.get(ALL_IN_A_PROCESS):
        return in_a_subprocess(words, cwd=cwd, timeout=timeout)
    return in_this_process(words, cwd=cwd, timeout=timeout)


def in_a_subprocess(words: Sequence[str], *, cwd: Path | None = None, timeout: float = 60) -> Run:
    """The installed console script, in its own process."""
    done = subprocess.run(
        [str(STOKER), *words],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or REPO,
        check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr)


def in_this_process(words: Sequence[str], *, cwd: Path | None = None, timeout: float = 60) -> Run:
    """`cli:app` on `words`, in a thread so that a hang ends the wait after `timeout` seconds."""
    from cli import app  # noqa: PLC0415 (as the console script: the CLI's imports on first use)

    codes: list[int] = []
    thread = threading.Thread(target=_run, args=(app, list(words), codes), daemon=True)
    with _as_a_fresh_process(cwd or REPO) as (stdout, stderr):
        thread.start()
        thread.join(timeout)
        if not thread.is_alive():
            gc.collect()  # what it left unclosed warns now, under its filters, as at its exit
        out, err = stdout.getvalue(), stderr.getvalue()
    if thread.is_alive():
        _HUNG.append(thread)
        raise subprocess.TimeoutExpired(
            ["stoker", *words], timeout, out, err + b"\n(in this process: it runs on, unkillable)"
        )
    return Run(codes[0], out.decode(), err.decode())


def _run(app: typer.Typer, words: list[str], codes: list[int]) -> None:
    """What the console script's process does, up to its exit code."""
    try:
        app(args=words, prog_name="stoker")  # standalone: it always ends in sys.exit
        code: object = 0
    except SystemExit as stop:
        code = stop.code
    except Exception as error:  # as the interpreter's hook: printed, code 1
        sys.excepthook(type(error), error, error.__traceback__)  # typer's, which app() set
        code = 1
    sys.stdout.flush()
    if code is None or isinstance(code, int):
        codes.append(code or 0)
    else:  # sys.exit("message"): the interpreter prints it to stderr and exits 1
        print(code, file=sys.stderr)
        codes.append(1)
    sys.stderr.flush()


def _python_default_warnings() -> None:
    """The filters of a fresh interpreter without -W or PYTHONWARNINGS (`warnings.filters`)."""
    warnings.resetwarnings()
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
    for ignored in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
        warnings.filterwarnings("ignore", category=ignored, append=True)
    warnings.showwarning = _print_warning  # printed, not pytest's record of them


def _print_warning(  # noqa: PLR0917 (the signature of warnings.showwarning)
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """A warning on stderr, as the interpreter prints one."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


@contextmanager
def _as_a_fresh_process(cwd: Path) -> Iterator[tuple[BytesIO, BytesIO]]:
    """Streams, folder, warning filters, excepthook and logging as the console script has them,
    put back as they were after."""
    before = Path.cwd()
    hook = sys.excepthook
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    with CliRunner().isolation() as (stdout, stderr, _), warnings.catch_warnings():
        _python_default_warnings()
        os.chdir(cwd)
        try:
            yield stdout, stderr
        finally:
            os.chdir(before)
            sys.excepthook = hook
            for added in set(root.handlers) - set(handlers):
                added.close()
            root.handlers[:], root.level = handlers, level
