"""`stoker backup`: a copy of the daemon's state file, taken while it runs."""

import os
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Annotated, BinaryIO

import typer

from cli.common import fail, print_json
from cli.connection import StateDir, _state_dir

_CHUNK = 1 << 20  # bytes copied at a time into the backup


def backup(
    out: Annotated[Path, typer.Argument(metavar="OUT.db", help="a new file")],
    state_dir: StateDir = None,
) -> None:
    """Copy the daemon's state file (jobs, their events and metrics, plans, fitted models)
    to OUT.db, whole and consistent while the daemon runs: SQLite's online backup, which
    copying the file (its WAL beside it) is not. The job folders (logs, checkpoints) are
    plain files, to copy as such. To restore: stop the daemon, put OUT.db in place of
    <state dir>/stoker.db (removing stoker.db-wal and -shm), start it."""
    found = _state_dir(state_dir)
    source = (found or Path(".stoker")) / "stoker.db"
    if not source.is_file():
        fail(f"no state file at {source}; give the daemon's --state-dir (or STOKER_STATE_DIR)")
    try:  # no link followed, nothing overwritten: the tokens' and secrets' peers only
        made = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        fail(f"{out} exists; give a new file (a backup never writes over one)")
    except OSError as error:
        fail(f"{out}: {error.strerror}")
    with os.fdopen(made, "wb") as copy:
        try:
            jobs = _copy(source, copy)
        except (sqlite3.Error, OSError) as error:  # not this user's to read, say
            copy.truncate(0)  # no half copy left: emptied through its descriptor, whatever
            _remove_if_ours(out, os.fstat(copy.fileno()))  # now holds that name
            fail(f"{source}: cannot be read ({error}); run as the daemon's user (root, say)")
        size = os.fstat(copy.fileno()).st_size
    print_json({"backup": str(out), "from": str(source), "jobs": jobs, "bytes": size})


def _copy(source: Path, out: BinaryIO) -> int:
    """SQLite's online backup of `source`, made in a private folder of this user's, then
    written into `out`, the descriptor the backup created: the folder OUT.db is in may be
    another user's, who could swap a link in for it between two opens (and SQLite opens a
    -wal beside any file it writes). The jobs the copy holds."""
    read_only = source.resolve().as_uri() + "?mode=ro"  # escaped: a path may hold # or ?
    with tempfile.TemporaryDirectory(prefix="stoker-backup-") as private:
        made = Path(private) / "stoker.db"
        kept, copy = sqlite3.connect(read_only, uri=True), sqlite3.connect(made)
        try:
            kept.backup(copy)
            copy.execute("PRAGMA journal_mode = DELETE")  # one file, whole: no -wal to go with it
            jobs = int(copy.execute("SELECT count(*) FROM jobs").fetchone()[0])
        finally:
            copy.close()
            kept.close()
        with made.open("rb") as whole:
            shutil.copyfileobj(whole, out, _CHUNK)
        out.flush()
        os.fsync(out.fileno())
    return jobs


def _remove_if_ours(out: Path, ours: os.stat_result) -> None:
    """Unlink `out` only if the name still holds the file this backup created."""
    try:
        now = os.stat(out, follow_symlinks=False)
    except OSError:
        return
    if (now.st_dev, now.st_ino) == (ours.st_dev, ours.st_ino):
        out.unlink()
