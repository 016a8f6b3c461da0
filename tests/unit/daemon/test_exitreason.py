"""A failed job's reason: its exit, its stderr's tail, and the hint for an interpreter that
lacks what the script imports (daemon/exitreason.py), on real log files."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from daemon.exitreason import exit_reason, launch_failure, zoo_launch_failure

MISSING = (
    "Traceback (most recent call last):\n  import timm\n"
    "ModuleNotFoundError: No module named 'timm'\n"
)


def failed_with(job_dir: Path, stderr: str, command: list[str], search_path: str = "") -> str:
    (job_dir / "stderr.log").write_text(stderr)
    return exit_reason(1, job_dir, command=command, search_path=search_path)


def test_a_bare_python_that_cannot_import_is_named_with_the_fix(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python3"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    why = failed_with(tmp_path, MISSING, ["python3", "train.py"], str(bin_dir))
    assert why.startswith("exited with code 1; stderr ends:\nTraceback (most recent call last):")
    hint = why.rsplit("\n", 1)[-1]
    assert hint.startswith(f"hint: 'timm' cannot be imported by {python}, the `python3` on the")
    assert "A job's PATH is the daemon's unless its env sets PATH" in hint
    assert hint.endswith("(`stoker submit -- /path/to/env/bin/python script.py`)")
    unfound = failed_with(tmp_path, MISSING, ["python", "train.py"], "")
    assert "hint: 'timm' cannot be imported by `python`. A job's PATH" in unfound


@pytest.mark.parametrize(
    ("stderr", "command"),
    [
        # an import warning early, then another error: that error is the reason
        ("ModuleNotFoundError: No module named 'triton'\nRuntimeError: CUDA out of memory\n",
         ["python", "t.py"]),
        # a package shadowed by a file of the same name: no interpreter would help
        ("ModuleNotFoundError: No module named 'a.b'; 'a' is not a package\n", ["python", "t.py"]),
        (MISSING, ["/opt/env/bin/python", "t.py"]),  # the user chose the interpreter
        (MISSING, ["bash", "run.sh"]),  # which python ran, bash does not say
        ("Traceback\nValueError: no\n", ["python", "t.py"]),
    ],
)  # fmt: skip
def test_no_hint_where_the_interpreter_is_not_the_likely_cause(
    tmp_path: Path, stderr: str, command: list[str]
) -> None:
    assert "hint" not in failed_with(tmp_path, stderr, command, "/usr/bin:/bin")


UNSET = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 9, in <module>\n    tag = os.environ["EXPERIMENT_TAG"]\n'
    '  File "<frozen os>", line 679, in __getitem__\n'
    "KeyError: 'EXPERIMENT_TAG'\n"
)


def test_a_variable_of_the_submitting_shell_is_said_to_be_no_jobs(tmp_path: Path) -> None:
    (tmp_path / "stderr.log").write_text(UNSET)
    command = ["python", "train.py"]
    why = exit_reason(1, tmp_path, command=command, variables={"PATH", "HOME"})
    assert why.rsplit("\n", 1)[-1] == (
        "hint: 'EXPERIMENT_TAG' is not in the job's environment. A job gets the variables its"
        " submit gives (`stoker submit --env NAME=VALUE`, or `env` in its job file) and"
        " stoker's own, none of the submitting shell's"
    )
    given = exit_reason(1, tmp_path, command=command, variables={"EXPERIMENT_TAG"})
    assert "hint" not in given, "it was given: the KeyError is another's"
    (tmp_path / "stderr.log").write_text("Traceback\n  table[key]\nKeyError: 'colour'\n")
    assert "hint" not in exit_reason(1, tmp_path, command=command), "a dict's, not environ's"


def test_a_script_missing_from_the_folder_the_job_ran_in_is_told_that_folder(
    tmp_path: Path,
) -> None:
    # A job file in jobs/ without `workdir` runs there, where train.py is not.
    said = (
        "/usr/bin/python3: can't open file '/home/a/jobs/train.py':"
        " [Errno 2] No such file or directory\n"
    )
    (tmp_path / "stderr.log").write_text(said)
    why = exit_reason(2, tmp_path, command=["python", "train.py"], workdir="/home/a/jobs")
    assert why.rsplit("\n", 1)[-1] == (
        "hint: /home/a/jobs/train.py does not exist. The job ran in /home/a/jobs: a job"
        " file's `workdir`, else the job file's own folder; a command's, the folder it was"
        " submitted from. Give the script's path from there, or set `workdir`"
    )


def test_a_zoo_job_runs_the_daemons_own_python_and_gets_no_hint(tmp_path: Path) -> None:
    (tmp_path / "stderr.log").write_text(MISSING)
    assert exit_reason(1, tmp_path) == "exited with code 1; stderr ends:\n" + MISSING.strip()


def test_a_rank_other_than_0_that_failed_on_an_import_is_hinted_too(tmp_path: Path) -> None:
    (tmp_path / "stderr.rank1.log").write_text(MISSING)
    why = exit_reason(1, tmp_path, ((1, 1),), command=["python", "t.py"], search_path="")
    assert why.startswith("rank 1 exited with code 1; stderr ends:\nTraceback")
    assert why.rsplit("\n", 1)[-1].startswith("hint: 'timm' cannot be imported by `python`.")


def _popen_error(argv: list[str], cwd: Path | None = None) -> OSError:
    try:
        subprocess.Popen(argv, cwd=cwd)
    except OSError as error:
        return error
    raise AssertionError(f"{argv} started")


def test_a_launch_names_the_program_it_could_not_execute_and_only_that(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")  # no executable bit
    denied = launch_failure(_popen_error([str(script)]), [str(script)], "/usr/bin")
    assert denied == (
        f"launch failed: the job's user may not execute {str(script)!r} (Permission denied); "
        "a script without its executable bit runs as `python script.py`"
    )
    gone = tmp_path / "gone"
    elsewhere = launch_failure(_popen_error([sys.executable], cwd=gone), [sys.executable], "")
    assert elsewhere == f"launch failed: No such file or directory: {gone}", "its workdir"


def test_a_program_behind_a_folder_closed_to_others_is_named_with_that_folder() -> None:
    # A virtual environment's python links to an interpreter in root's home (0700): the
    # tenant's unix user may not pass, and the launch is refused as the user's. (Not in
    # pytest's tmp_path: its base is closed to others too.)
    with tempfile.TemporaryDirectory() as made:
        _closed_on_the_way(Path(made))


def _closed_on_the_way(tmp_path: Path) -> None:
    home = tmp_path / "root-home"
    (home / "bin").mkdir(parents=True)
    interpreter = home / "bin" / "python3"
    interpreter.write_text("#!/bin/sh\n")
    interpreter.chmod(0o755)
    home.chmod(0o700)
    venv = tmp_path / "open" / "bin"
    venv.mkdir(parents=True)
    tmp_path.chmod(0o755)
    (tmp_path / "open").chmod(0o755)
    venv.chmod(0o755)
    (venv / "python").symlink_to(interpreter)
    error = PermissionError(13, "Permission denied", "python")
    said = launch_failure(error, ["python", "t.py"], str(venv))
    assert said.endswith("runs as `python script.py`"), "not the daemon's PATH: not looked at"
    os.environ["PATH"], before = str(venv), os.environ["PATH"]  # the daemon's own
    try:
        said = launch_failure(error, ["python", "t.py"], str(venv))
    finally:
        os.environ["PATH"] = before
    assert said == (
        "launch failed: the job's user may not execute 'python' (Permission denied): it is"
        f" {venv / 'python'} -> {interpreter}, and {home} (mode 0700) lets no other user"
        " through; install what the job runs where its user can reach it, or submit an"
        " interpreter it may run by its full path"
    )
    # A zoo job runs the daemon's own interpreter: the same cause, the operator's fix.
    daemons = str(venv / "python")
    zoo = zoo_launch_failure(PermissionError(13, "Permission denied", daemons), daemons)
    assert zoo == (
        "launch failed: the job's user may not execute the daemon's Python,"
        f" {daemons} -> {interpreter} (Permission denied): {home} (mode 0700) lets no other"
        " user through. A zoo job runs the daemon's own interpreter: install stoker where"
        " every user may pass (/opt/stoker, `make install` there), or submit the model as a"
        " command job with an interpreter the user may run"
    )
    other = PermissionError(13, "Permission denied", str(tmp_path / "jobs"))
    assert zoo_launch_failure(other, daemons) is None, "not the interpreter: said as before"


def test_a_missing_program_by_full_path_is_named_as_given(tmp_path: Path) -> None:
    program = str(tmp_path / "env" / "bin" / "python")
    gone = launch_failure(_popen_error([program]), [program], "/usr/bin")
    assert gone == (
        f"launch failed: {program!r} does not exist; give the path of a file on the node"
    )


def test_a_script_whose_interpreter_is_missing_is_told_so_not_that_it_is(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/no/such/shell\necho hi\n")
    script.chmod(0o755)
    said = launch_failure(
        _popen_error(["./run.sh"], cwd=tmp_path), ["./run.sh"], "/usr/bin", str(tmp_path)
    )
    assert said == (
        "launch failed: './run.sh' is there, but the interpreter its first line (#!) names"
        " is not: '/no/such/shell'; fix that line, or run it as `python script.py`"
    )


def test_a_missing_program_by_relative_path_names_the_folder_it_was_looked_for_in(
    tmp_path: Path,
) -> None:
    missing = launch_failure(
        _popen_error(["./nope.sh"], cwd=tmp_path), ["./nope.sh"], "/usr/bin", str(tmp_path)
    )
    assert missing == (
        f"launch failed: './nope.sh' does not exist in {tmp_path}, where the job runs; give"
        " its path from there (or an absolute one), or submit from its folder"
    )
