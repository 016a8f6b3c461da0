"""`stoker backup` into a folder another user controls: the copy is written only through
the descriptor the backup created, so a link swapped in for OUT.db between two opens gets
nothing (issue 37, finding 4: a watcher won 9 races of 20 and read every job's secrets)."""

import os
import threading
from pathlib import Path

import pytest
import typer

from cli.backup import backup
from daemon.store import Store


def state_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "state"
    folder.mkdir()
    Store(folder / "stoker.db").close()  # a real state file, WAL and all
    return folder


def test_a_link_swapped_in_for_the_backup_gets_nothing(tmp_path: Path) -> None:
    state = state_dir(tmp_path)
    theirs = tmp_path / "theirs"  # the folder the other user writes
    theirs.mkdir()
    stolen = tmp_path / "stolen"  # a file of theirs they can read
    stolen.touch()
    stop = threading.Event()

    def watcher(target: Path) -> None:
        while not stop.is_set():  # as soon as the backup's file is there, a link for it
            try:
                if target.is_file() and not target.is_symlink():
                    target.unlink()
                    target.symlink_to(stolen)
            except OSError:
                pass

    for attempt in range(20):
        out = theirs / f"backup-{attempt}.db"
        stop.clear()
        racer = threading.Thread(target=watcher, args=(out,))
        racer.start()
        try:
            backup(out, state)
        except typer.Exit:
            pass  # refused or failed: either way, nothing of ours went through their link
        finally:
            stop.set()
            racer.join()
    assert stolen.stat().st_size == 0, "the state file went through their link"
    assert not list(tmp_path.glob("stolen-*")), "nor did SQLite's -wal or -shm beside it"


def test_a_backup_is_one_whole_file_of_its_owners(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "copy.db"
    backup(out, state_dir(tmp_path))
    assert '"jobs": 0' in capsys.readouterr().out
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    assert sorted(os.listdir(tmp_path)) == ["copy.db", "state"], "no -wal made beside it"
    Store(out).close()  # and it opens as a state file


def test_a_link_already_in_its_place_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.touch()
    out = tmp_path / "copy.db"
    out.symlink_to(victim)
    with pytest.raises(typer.Exit):
        backup(out, state_dir(tmp_path))
    assert victim.stat().st_size == 0
