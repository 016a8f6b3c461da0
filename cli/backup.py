"""`stoker backup`: a copy of the daemon's state file, taken while it runs."""

import os
import sqlite3
from pathlib import Path
from typing import Annotated

import typer

from cli.client import StateDir, _state_dir
from cli.common import fail, print_json


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
    try:
        made = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # the tokens' peers
    except FileExistsError:
        fail(f"{out} exists; give a new file (a backup never writes over one)")
    except OSError as error:
        fail(f"{out}: {error.strerror}")
    os.close(made)
    try:
        jobs = _copy(source, out)
    except sqlite3.Error as error:  # not this user's to read, say: no half copy left
        out.unlink(missing_ok=True)
        fail(f"{source}: cannot be read ({error}); run as the daemon's user (root, say)")
    print_json({"backup": str(out), "from": str(source), "jobs": jobs, "bytes": out.stat().st_size})


def _copy(source: Path, out: Path) -> int:
    """SQLite's online backup of `source` into `out`; the jobs it holds."""
    read_only = source.resolve().as_uri() + "?mode=ro"  # escaped: a path may hold # or ?
    kept, copy = sqlite3.connect(read_only, uri=True), sqlite3.connect(out)
    try:
        kept.backup(copy)
        return int(copy.execute("SELECT count(*) FROM jobs").fetchone()[0])
    finally:
        copy.close()
        kept.close()
