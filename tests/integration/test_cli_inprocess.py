"""`stoker(...)` runs most commands in this process (tests/integration/cli.py): it must show
what the installed console script shows a user, and leave this process as it found it."""

import logging
import subprocess
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import cli.allocate
from tests.integration.cli import in_a_subprocess, in_this_process, stoker


def test_the_console_script_and_the_app_in_this_process_print_and_exit_alike(
    tmp_path: Path,
) -> None:
    here = Path.cwd()
    for words in (["workload", "trace", "--limit", "0"], ["allocate", "nowhere.json"]):
        script = in_a_subprocess(words, cwd=tmp_path)
        app = in_this_process(words, cwd=tmp_path)
        assert script.code == 2 and script.stderr.startswith("error: "), script
        assert app == script
    assert Path.cwd() == here


def test_an_uncaught_exception_is_code_1_with_its_traceback_on_stderr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("a bug in the command")

    monkeypatch.setattr(cli.allocate, "load_request", broken)
    run = stoker("allocate", "request.json")
    assert run.code == 1 and run.stdout == ""
    assert "Traceback" in run.stderr and "a bug in the command" in run.stderr


def test_warnings_print_as_in_a_fresh_interpreter_and_logging_set_up_is_undone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def noisy(*_: object) -> None:
        logging.basicConfig(level=logging.DEBUG)
        warnings.warn("careful", UserWarning, stacklevel=1)  # pytest's filter would raise it
        raise SystemExit("stopped")

    monkeypatch.setattr(cli.allocate, "load_request", noisy)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    run = stoker("allocate", "request.json")
    assert run.code == 1 and "UserWarning: careful" in run.stderr
    assert run.stderr.endswith("stopped\n"), "sys.exit(text): the text on stderr, code 1"
    assert (root.handlers, root.level) == (handlers, level)


def test_a_hung_call_fails_after_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    release, ended = threading.Event(), threading.Event()

    def hangs(*_: object) -> None:
        try:
            release.wait(60)
            raise SystemExit(0)
        finally:
            ended.set()

    monkeypatch.setattr(cli.allocate, "load_request", hangs)
    with pytest.raises(subprocess.TimeoutExpired, match="allocate"):
        stoker("allocate", "request.json", timeout=0.2)
    release.set()
    assert ended.wait(60), "the thread it left ends once released"


def test_a_call_from_a_thread_beside_the_test_runs_the_console_script(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("a bug of this process's copy only")

    monkeypatch.setattr(cli.allocate, "load_request", broken)
    with ThreadPoolExecutor(1) as beside:
        run = beside.submit(stoker, "allocate", "nowhere.json").result()
    assert run.code == 2 and run.stderr.startswith("error: "), "its own, unpatched process"
