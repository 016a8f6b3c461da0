"""A command job's ranks as the launcher starts them (real processes, tiny Python ones)."""

import os
import sys
import time
from pathlib import Path

from daemon.launcher import Launcher, RankProcess


def ranks(*scripts: str) -> list[RankProcess]:
    return [RankProcess(argv=[sys.executable, "-c", script], env={}) for script in scripts]


def test_ranks_share_one_process_group_led_by_rank_0(tmp_path: Path) -> None:
    launcher = Launcher(tmp_path)
    report = "import os, sys; print(os.getpgid(0)); sys.stdout.flush()"
    leader = launcher.launch_ranks("j", ranks(report, report, report))
    deadline = time.monotonic() + 20
    while not (done := launcher.exited()):
        assert time.monotonic() < deadline, "the job never ended"
        time.sleep(0.02)
    assert done == [("j", 0)]
    logs = ["stdout.log", "stdout.rank1.log", "stdout.rank2.log"]
    assert {(tmp_path / "j" / log).read_text().strip() for log in logs} == {str(leader)}
    assert os.getpgid(0) != leader, "not the daemon's group: a stop signals the job alone"
