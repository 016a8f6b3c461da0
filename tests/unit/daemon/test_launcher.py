"""A command job's ranks as the launcher starts them (real processes, tiny Python ones): one
process group, and a failure that names the rank that failed, not those it took down."""

import os
import sys
import time
from pathlib import Path

import pytest

from daemon.exitreason import exit_reason
from daemon.launcher import Exit, Launcher, RankProcess, log_file


def ranks(*scripts: str) -> list[RankProcess]:
    return [RankProcess(argv=[sys.executable, "-c", script], env={}) for script in scripts]


def wait_for_exit(launcher: Launcher) -> Exit:
    deadline = time.monotonic() + 20
    while not (done := launcher.exited()):
        assert time.monotonic() < deadline, "the job never ended"
        time.sleep(0.02)
    (ended,) = done
    return ended


def test_ranks_share_one_process_group_led_by_rank_0(tmp_path: Path) -> None:
    launcher = Launcher(tmp_path)
    report = "import os, sys; print(os.getpgid(0)); sys.stdout.flush()"
    leader = launcher.launch_ranks("j", ranks(report, report, report))
    assert wait_for_exit(launcher) == Exit("j", 0)
    groups = {log_file(tmp_path / "j", "stdout", rank).read_text().strip() for rank in range(3)}
    assert groups == {str(leader)}
    assert os.getpgid(0) != leader, "not the daemon's group: a stop signals the job alone"


def test_a_rank_that_fails_takes_the_others_down_and_is_the_one_named(tmp_path: Path) -> None:
    launcher = Launcher(tmp_path)
    waits = "import time; time.sleep(60)"
    fails = "import sys; sys.exit('rank 1: the shapes do not match')"
    launcher.launch_ranks("j", ranks(waits, fails))
    ended = wait_for_exit(launcher)
    assert (ended.code, ended.failures) == (1, ((1, 1),)), "rank 0 was stopped, not failed"
    why = exit_reason(ended.code, tmp_path / "j", ended.failures)
    assert why == "rank 1 exited with code 1; stderr ends:\nrank 1: the shapes do not match"


def test_a_failure_of_rank_0_alone_reads_as_before(tmp_path: Path) -> None:
    (tmp_path / "stderr.log").write_text("Traceback\nValueError: no\n")
    assert (
        exit_reason(1, tmp_path, ((0, 1),))
        == "exited with code 1; stderr ends:\nTraceback\nValueError: no"
    )
    assert (
        exit_reason(-9, tmp_path)
        == "killed by signal 9 (SIGKILL); stderr ends:\nTraceback\nValueError: no"
    )


def test_a_relaunch_is_marked_in_the_logs_and_the_reason_is_its_own(tmp_path: Path) -> None:
    launcher = Launcher(tmp_path)
    crash = (
        "import sys; print('stoker: resuming', file=sys.stderr); "
        "exec('def step(n):\\n    raise ValueError(f\"bad batch {n}\")\\n'); step(ATTEMPT)"
    )
    for attempt in ("1", "2"):
        rank = RankProcess(
            argv=[sys.executable, "-c", crash.replace("ATTEMPT", attempt)],
            env={"STOKER_ATTEMPT": str(int(attempt) - 1)},
        )
        launcher.launch_ranks("j", [rank])
        ended = wait_for_exit(launcher)
    log = (tmp_path / "j" / "stderr.log").read_text()
    first, again = log.split("\n----- stoker: started again at ")
    assert "bad batch 1" in first and again.splitlines()[0].endswith(", restart 1 -----")
    why = exit_reason(ended.code, tmp_path / "j")
    tail = why.split("stderr ends:\n")[1]
    assert tail.startswith("Traceback (most recent call last):"), "the whole traceback"
    assert tail.endswith("ValueError: bad batch 2") and "bad batch 1" not in why
    assert "stoker: resuming" not in tail and "started again" not in tail
    assert not (tmp_path / "j" / "stdout.log").read_text(), "nothing to mark in an empty log"


def test_a_stop_waits_for_the_group_not_its_leader_and_kills_what_stays(tmp_path: Path) -> None:
    # Rank 0 leaves on SIGTERM at once; rank 1, stuck (here: deaf to SIGTERM, as a rank in
    # a collective is), must be killed after the grace, not waited for without end.
    launcher = Launcher(tmp_path)
    leaves = "import time; print('up', flush=True); time.sleep(60)"
    stays = (
        "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print(os.getpid(), flush=True); time.sleep(60)"
    )
    launcher.launch_ranks("j", ranks(leaves, stays))
    said = [log_file(tmp_path / "j", "stdout", rank) for rank in range(2)]
    deadline = time.monotonic() + 20
    while not all(log.read_text().strip() for log in said):
        assert time.monotonic() < deadline, "the ranks never started"
        time.sleep(0.05)
    stuck = int(said[1].read_text())
    started = time.monotonic()
    launcher.stop("j", grace_s=0.5)
    assert time.monotonic() - started < 5.0, "the daemon's loop was not held"
    with pytest.raises(ProcessLookupError):
        os.kill(stuck, 0)  # killed, and reaped


def test_an_adopted_job_ends_with_the_last_process_of_its_group(tmp_path: Path) -> None:
    # A daemon restarted adopts a job by its rank 0's pid; rank 1 may hold its GPU on.
    first = Launcher(tmp_path)  # the daemon that started it (here: it reaps them too)
    leader = first.launch_ranks("j", ranks("pass", "import time; time.sleep(2)"))
    again = Launcher(tmp_path)
    again.adopt("j", leader)
    started, ended = time.monotonic(), list[Exit]()
    while not ended:
        first.exited()  # the zombies' parent reaps them, as init does a dead daemon's
        ended = again.exited()
        assert time.monotonic() - started < 20, "never ended"
        time.sleep(0.05)
    assert ended == [Exit("j", None)]
    assert time.monotonic() - started > 1.5, "not at its leader's exit: its group's last"


def test_an_exit_is_told_once_its_log_sink_has_copied_the_last_of_its_output(
    tmp_path: Path,
) -> None:
    # 4 MB to stderr, then a traceback's last line and exit 1: the reason quotes that line,
    # which the sink may still be copying when the process is reaped.
    launcher = Launcher(tmp_path)
    loud = (
        "import sys\n"
        "sys.stderr.write(('x' * 99 + '\\n') * 40_000)\n"
        "sys.stderr.write('ValueError: the last line\\n')\n"
        "sys.exit(1)\n"
    )
    launcher.launch_ranks("j", ranks(loud))
    ended = wait_for_exit(launcher)
    assert ended.code == 1
    log = log_file(tmp_path / "j", "stderr", 0).read_bytes()
    assert log.endswith(b"ValueError: the last line\n"), log[-200:]
    both = log_file(tmp_path / "j", "stdall", 0).read_bytes()
    assert both.endswith(b"e ValueError: the last line\n")
