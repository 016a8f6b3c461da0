"""A job's folder may be its tenant's: a name there that is a link to the daemon's files, a
hard link, or a FIFO is never written, read or cut by the (root) daemon. Real files, links
and FIFOs."""

import os
import pwd
import threading
from pathlib import Path

import pytest

from daemon.exitreason import exit_reason
from daemon.jobfiles import UnsafeJobFile, append_to, open_checked, read_end
from daemon.joblogs import tail_lines
from daemon.launcher import Launcher, RankProcess
from daemon.logcap import cap_logs
from daemon.tenants import UnixUser

SECRET = "root:$6$not-for-tenants\n"


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path]:
    """A job folder whose stderr.log links to a file of the daemon's, and that file."""
    daemon_file = tmp_path / "shadow"
    daemon_file.write_text(SECRET * 10)
    job_dir = tmp_path / "jobs" / "j"
    job_dir.mkdir(parents=True)
    (job_dir / "stderr.log").symlink_to(daemon_file)
    return job_dir, daemon_file


def test_a_plain_file_opens_and_anything_else_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "stdout.log"
    with append_to(log, {os.geteuid()}) as out:
        out.write(b"hello\n")
    assert read_end(log, 3) == (b"lo\n", 6)
    with pytest.raises(UnsafeJobFile, match="owned by uid"):
        open_checked(log, os.O_RDONLY, owners={os.geteuid() + 1})
    (tmp_path / "link").symlink_to(log)
    os.link(log, tmp_path / "second-name")
    os.mkfifo(tmp_path / "fifo")
    for name, why in (("link", "symbolic link"), ("fifo", "not a regular file")):
        with pytest.raises(UnsafeJobFile, match=why):
            open_checked(tmp_path / name, os.O_RDONLY)
    if os.geteuid() == 0:  # root's file by another name: what a tenant's link would be
        with pytest.raises(UnsafeJobFile, match="hard link"):
            open_checked(log, os.O_RDONLY)
    assert read_end(tmp_path / "fifo", 100) == (b"", 0), "a FIFO reads as empty, and never blocks"


def test_a_planted_link_is_neither_written_nor_read_nor_cut(planted: tuple[Path, Path]) -> None:
    job_dir, daemon_file = planted
    launcher = Launcher(job_dir.parent)
    rank = RankProcess(argv=["true"], env={})
    with pytest.raises(UnsafeJobFile, match="symbolic link"):
        launcher.launch_ranks("j", [rank])
    assert daemon_file.read_text() == SECRET * 10 and daemon_file.stat().st_uid == os.geteuid()
    assert "not-for-tenants" not in exit_reason(1, job_dir)
    lines, _ = tail_lines(job_dir / "stderr.log", 10)
    assert lines == []
    assert cap_logs([job_dir], max_bytes=10) == []
    assert daemon_file.read_text() == SECRET * 10, "not truncated"
    assert not (job_dir / "stderr.log.1").exists(), "not copied where the tenant reads"


def test_a_fifo_for_a_log_does_not_block_the_daemon(tmp_path: Path) -> None:
    job_dir = tmp_path / "j"
    job_dir.mkdir()
    os.mkfifo(job_dir / "stderr.log")
    done = threading.Event()

    def read() -> None:
        exit_reason(1, job_dir)
        tail_lines(job_dir / "stderr.log", 10)
        cap_logs([job_dir], max_bytes=0)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(timeout=5), "a reader blocked on the FIFO"


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a folder to a user needs root")
def test_handing_a_folder_to_its_user_changes_a_planted_link_not_its_target(
    planted: tuple[Path, Path],
) -> None:
    job_dir, daemon_file = planted
    nobody = pwd.getpwnam("nobody")
    user = UnixUser(name="nobody", uid=nobody.pw_uid, gid=nobody.pw_gid, home=nobody.pw_dir)
    Launcher(job_dir.parent).hand_over("j", user)
    assert daemon_file.stat().st_uid == os.geteuid(), "what the link points to stays the daemon's"
    assert (job_dir / "stderr.log").lstat().st_uid == nobody.pw_uid
    os.link(daemon_file, job_dir / "output" / "hard")  # the daemon's file, by another name
    (job_dir / "output" / "mine.txt").write_text("the job's\n")
    Launcher(job_dir.parent).hand_over("j", user)
    assert daemon_file.stat().st_uid == os.geteuid(), "a hard link is not handed over"
    assert (job_dir / "output" / "mine.txt").stat().st_uid == nobody.pw_uid
