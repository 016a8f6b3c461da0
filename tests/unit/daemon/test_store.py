"""The state file: real SQLite in WAL mode, a schema version, every write committed."""

import sqlite3
from pathlib import Path

import pytest

from daemon.statelock import StoreError
from daemon.store import SCHEMA_VERSION, JobRecord, Store
from daemon.store.reasons import Worded
from scheduler.errors import IllegalTransition


def record(job_id: str, tenant: str = "alice") -> JobRecord:
    return JobRecord(
        id=job_id,
        tenant=tenant,
        name=job_id,
        spec={"model": "Resnet18", "gpus": 1},
        state="submitted",
        submitted_at=1.0,
        updated_at=1.0,
        restarts=0,
        checkpoint="",
        pid=None,
    )


def test_a_job_written_is_read_back_by_another_connection(tmp_path: Path) -> None:
    store = Store(tmp_path / "stoker.db")
    store.add_job(record("a"))
    store.update_job("a", 1.5, state="pending")
    store.update_job("a", 1.6, state="starting")
    store.update_job("a", 2.0, state="running", pid=123, placement=(2, 3))
    other = Store(tmp_path / "stoker.db")  # as a restarted daemon would
    found = other.job("a")
    assert found is not None and found.state == "running" and found.pid == 123
    assert found.placement == (2, 3)
    assert [e.kind for e in other.events("a")] == ["submitted"]
    mode = sqlite3.connect(tmp_path / "stoker.db").execute("PRAGMA journal_mode").fetchone()
    assert mode == ("wal",)


def test_the_store_refuses_a_state_change_off_the_transition_table(tmp_path: Path) -> None:
    store = Store(tmp_path / "stoker.db")
    store.add_job(record("a"))
    with pytest.raises(IllegalTransition, match="cannot go from submitted to running"):
        store.update_job("a", 2.0, state="running", pid=7)
    found = store.job("a")
    assert found is not None and (found.state, found.pid) == ("submitted", None)  # nothing
    store.update_job("a", 3.0, state="cancelled")
    with pytest.raises(IllegalTransition):
        store.update_job("a", 4.0, state="submitted")  # a final state has no exit
    store.update_job("a", 5.0, state="cancelled", checkpoint="x")  # no change is no transition
    with pytest.raises(StoreError, match="no job"):
        store.update_job("nobody", 6.0, state="running")


def test_tenants_see_their_own_jobs(tmp_path: Path) -> None:
    store = Store(tmp_path / "stoker.db")
    store.add_job(record("a", "alice"))
    store.add_job(record("b", "bob"))
    assert [job.id for job in store.jobs("bob")] == ["b"]
    assert [job.id for job in store.jobs()] == ["a", "b"]


def test_plans_keep_their_history_across_generations_that_restart(tmp_path: Path) -> None:
    store = Store(tmp_path / "stoker.db")
    store.add_plan(1, 1.0, "optimal", {"a": {"workers_per_gpu": 4}})
    store.add_plan(1, 2.0, "optimal", {"a": {"workers_per_gpu": 2}})  # after a restart
    assert [plan["at"] for plan in store.plans()] == [2.0, 1.0]


def test_only_job_columns_can_be_updated(tmp_path: Path) -> None:
    store = Store(tmp_path / "stoker.db")
    store.add_job(record("a"))
    with pytest.raises(ValueError, match="not job columns"):
        store.update_job("a", 2.0, tenant="mallory")


def test_a_file_of_another_version_or_program_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "stoker.db"
    Store(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match="schema version"):
        Store(path)
    foreign = tmp_path / "other.db"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE photos (id INTEGER)")
    with pytest.raises(StoreError, match="not a stoker state file"):
        Store(foreign)


def as_written_by(path: Path, version: int, *columns: str) -> None:
    """Make the state file at `path` one of schema `version`: without the job `columns`
    later versions added."""
    with sqlite3.connect(path) as db:
        for column in columns:
            db.execute(f"ALTER TABLE jobs DROP COLUMN {column}")  # the test's own names
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))


def test_a_file_of_an_older_version_is_brought_up_to_date_with_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "stoker.db"
    old = Store(path)
    old.add_job(record("a"))
    old.close()
    as_written_by(path, 4, "total_iterations", "script_batch_size")  # no job lengths yet
    store = Store(path)
    found = store.job("a")
    assert found is not None and (found.total_iterations, found.script_batch_size) == (None, None)
    store.update_job("a", 2.0, total_iterations=6_400, script_batch_size=32)
    store.close()
    again = Store(path).job("a")  # and it stays
    assert again is not None and (again.total_iterations, again.script_batch_size) == (6_400, 32)
    with sqlite3.connect(path) as db:
        row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert row == (str(SCHEMA_VERSION),)


def test_when_a_job_first_ran_and_ended_is_kept_and_read_back_from_its_events(
    tmp_path: Path,
) -> None:
    path = tmp_path / "stoker.db"
    store = Store(path)
    store.add_job(record("a"))
    for at, state in ((2.0, "pending"), (3.0, "starting"), (4.0, "running"), (5.0, "submitted")):
        store.update_job("a", at, state=state)  # a restart: back to the queue
        store.add_event("a", at, "state", {"to": state})
    for at, state in ((6.0, "pending"), (7.0, "starting"), (8.0, "running"), (9.0, "completed")):
        store.update_job("a", at, state=state)
        store.add_event("a", at, "state", {"to": state})
    store.add_job(record("b"))
    store.update_job("b", 3.0, state="cancelled")
    store.add_event("b", 3.0, "state", {"to": "cancelled"})
    a, b = store.job("a"), store.job("b")
    assert a is not None and (a.started_at, a.ended_at) == (3.0, 9.0), "its first launch"
    assert b is not None and (b.started_at, b.ended_at) == (None, 3.0), "it never ran"
    store.close()
    as_written_by(path, 6, "started_at", "ended_at")  # no such columns yet
    migrated = Store(path)
    a, b = migrated.job("a"), migrated.job("b")
    migrated.close()
    assert a is not None and (a.started_at, a.ended_at) == (3.0, 9.0), "from its events"
    assert b is not None and (b.started_at, b.ended_at) == (None, 3.0)


def test_ids_cut_short_are_found_for_their_tenant_only(tmp_path: Path) -> None:
    store = Store(tmp_path / "stoker.db")
    store.add_job(record("train-9f58c3d2a1b0"))
    store.add_job(record("train-9f11aaaa0000", tenant="bob"))
    assert store.ids_starting("train-9f5", None) == ["train-9f58c3d2a1b0"]
    assert store.ids_starting("train-9f", "alice") == ["train-9f58c3d2a1b0"], "not bob's"
    assert store.ids_starting("tra", None) == [], "too short to mean one"
    store.close()


def test_the_dashboard_is_shown_every_live_job_and_only_the_newest_ended(tmp_path: Path) -> None:
    # It drew every job a node ever ran: 1.4 s of blocked event loop at 3,000 (issue 37).
    store = Store(tmp_path / "stoker.db")
    for number in range(6):
        job = record(f"j{number}", tenant="bob" if number == 5 else "alice")
        store.add_job(JobRecord(**{**vars(job), "submitted_at": float(number)}))
    for ended in ("j0", "j2", "j3", "j5"):
        store.update_job(ended, 9.0, state="cancelled")
    shown, older = store.shown_jobs("alice", ended=1)
    assert [job.id for job in shown] == ["j1", "j3", "j4"], "oldest first, the newest ended"
    assert older == 2, "j0 and j2, not drawn"
    everyone, _ = store.shown_jobs(None, ended=10)
    assert len(everyone) == 6


def test_a_file_that_kept_reasons_in_events_only_keeps_each_jobs_reason_in_words(
    tmp_path: Path,
) -> None:
    # Schema 8 kept why only in a job's events; the reader took the newest state change, stop
    # after the end, or failure after the end that had a `why`. The migration keeps those
    # words on the job's row (their types are unknown), and events stay as they were.
    path = tmp_path / "stoker.db"
    store = Store(path)
    said: dict[str, list[tuple[str, dict[str, object]]]] = {
        "failed": [("state", {"to": "failed", "why": "exited with code 1"})],
        "saved": [
            ("state", {"to": "completed", "why": "finished"}),
            ("exited", {"code": 1, "after_end": "failed", "why": "completed its final step"}),
            ("exited", {"code": 0}),  # no why: not a reason
        ],
        "stopped": [
            ("state", {"to": "completed", "why": "finished"}),
            ("stopped", {"by": "bob", "why": "its processes ... were stopped by bob"}),
        ],
        "running": [
            ("state", {"to": "running", "why": "re-attached: its agent outlived the daemon"}),
            ("state", {"from": "paused", "to": "running"}),  # said nothing: no reason
        ],
        "new": [],
    }
    for job_id, events in said.items():
        store.add_job(record(job_id))
        for kind, data in events:
            store.add_event(job_id, 2.0, kind, data)
    before = [(e.seq, e.kind, e.data) for e in store.events()]
    store.close()
    as_written_by(path, 8, "reason")
    migrated = Store(path)
    assert {job_id: migrated.reason(job_id) for job_id in said} == {
        "failed": "exited with code 1",
        "saved": "completed its final step",
        "stopped": "its processes ... were stopped by bob",
        "running": "",
        "new": "",
    }
    failed = migrated.job("failed")
    assert failed is not None and failed.reason == Worded("exited with code 1")
    assert [(e.seq, e.kind, e.data) for e in migrated.events()] == before
    migrated.close()
    with sqlite3.connect(path) as db:
        row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert row == (str(SCHEMA_VERSION),) == ("9",)
