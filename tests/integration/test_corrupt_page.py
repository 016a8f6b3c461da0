"""Issue 37, finding 11: a state file with one corrupt page passed the start check, and
`/v1/allocations/history` and `/v1/dashboard` then answered 500. The start checks every
page (SQLite's quick check) and refuses with one clear line, as for a file that is not a
database at all."""

import sqlite3
import time
from pathlib import Path

from daemon.store import JobRecord, Store
from tests.integration.cli import stoker


def _filled(path: Path) -> None:
    """A state file with enough plans and events to span many pages."""
    store = Store(path)
    record = JobRecord("a", "alice", "a", {"model": "Resnet18"}, "submitted", 1.0, 1.0, 0, "", None)
    store.add_job(record)
    for gen in range(300):
        store.add_plan(gen, time.time(), "balance", {"a": {"workers_per_gpu": gen}})
        store.add_event("a", time.time(), "note", {"text": "x" * 200, "gen": gen})
    store.close()
    with sqlite3.connect(path) as db:  # into the main file, so that damage stays there
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _corrupt_a_page(path: Path) -> None:
    """Overwrite the middle of a page deep in the file, as a bad disk sector would."""
    page = 4096
    data = bytearray(path.read_bytes())
    assert len(data) > 8 * page, "the file spans many pages"
    start = 6 * page
    data[start : start + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))


def test_a_corrupt_page_is_one_clear_error_at_start(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    database = state / "stoker.db"
    _filled(database)
    _corrupt_a_page(database)
    run = stoker("serve", "--state-dir", state, "--port", "1")
    assert run.code != 0 and "Traceback" not in run.stderr, run.stderr
    assert f"{database}: cannot be used as stoker's state" in run.stderr
    assert "corrupt" in run.stderr and "Restore it from a backup" in run.stderr
    assert len(run.stderr.splitlines()) <= 3, run.stderr
