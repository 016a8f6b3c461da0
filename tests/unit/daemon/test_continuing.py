"""A job that goes on from an ended job's checkpoint: who may, and what is put in place."""

from pathlib import Path

import pytest

from daemon.continuing import ContinueFailed, check, seed
from daemon.items import SubmitError
from daemon.store import JobRecord, Store


def record(job_id: str, tenant: str = "alice", state: str = "submitted", **spec: str) -> JobRecord:
    return JobRecord(
        id=job_id,
        tenant=tenant,
        name=job_id,
        spec={"command": ["python", "train.py"], "batch_size": 8, "gpus": 1, **spec},
        state=state,
        submitted_at=1.0,
        updated_at=1.0,
        restarts=0,
        checkpoint="",
        pid=None,
    )


def checkpoint(jobs: Path, job_id: str, number: int) -> Path:
    folder = jobs / job_id / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"checkpoint-{number:08d}.pt"
    path.write_bytes(b"model %d" % number)
    return path


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "stoker.db")
    store.add_job(record("ended"))
    store.update_job("ended", 2.0, state="cancelled")
    store.add_job(record("live"))
    store.add_job(record("bobs", tenant="bob"))
    store.update_job("bobs", 2.0, state="cancelled")
    return store


@pytest.mark.parametrize(
    ("earlier", "said"),
    [
        ("nobody", "no job 'nobody' of yours"),
        ("bobs", "no job 'bobs' of yours"),  # another tenant's is not named as such
        ("live", "job live is submitted; it can be continued once it has ended"),
        ("bobs@admin", "job bobs is bob's, and a job goes on only as its tenant's"),
        ("ended", "job ended left no checkpoint"),
    ],
)
def test_a_job_that_cannot_go_on_is_refused_naming_continue_from(
    store: Store, tmp_path: Path, earlier: str, said: str
) -> None:
    earlier, _, tenant = earlier.partition("@")
    with pytest.raises(SubmitError) as refused:
        check(
            store,
            tmp_path / "jobs",
            record("next", tenant=tenant or "alice", continue_from=earlier),
            simulated=False,
            exiting=frozenset(),
        )
    assert refused.value.field == "continue_from" and said in refused.value.message


def test_the_newest_checkpoint_is_put_in_place_once_and_a_planted_link_is_passed_over(
    store: Store, tmp_path: Path
) -> None:
    jobs = tmp_path / "jobs"
    checkpoint(jobs, "ended", 6)
    newest = checkpoint(jobs, "ended", 7)
    (jobs / "ended" / "checkpoints" / "checkpoint-00000009.pt").symlink_to("/etc/shadow")
    settings = record("next", continue_from="ended")
    check(store, jobs, settings, simulated=False, exiting=frozenset())
    with pytest.raises(SubmitError, match="simulated agent"):
        check(store, jobs, settings, simulated=True, exiting=frozenset())
    with pytest.raises(SubmitError, match="its processes are still exiting"):
        check(store, jobs, settings, simulated=False, exiting=frozenset({"ended"}))
    placed = seed(jobs, "next", settings.settings)
    assert placed == jobs / "next" / "checkpoints" / "checkpoint-00000007.pt"
    assert placed.read_bytes() == b"model 7" and placed.stat().st_ino == newest.stat().st_ino
    assert seed(jobs, "next", settings.settings) is None, "a relaunch goes on from its own"


def test_a_checkpoint_gone_by_the_launch_fails_it_saying_so(tmp_path: Path) -> None:
    with pytest.raises(ContinueFailed, match="job ended's checkpoints are gone"):
        seed(tmp_path / "jobs", "next", record("next", continue_from="ended").settings)
