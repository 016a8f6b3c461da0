"""A job that goes on from an ended job's checkpoint: who may, and where it reads it."""

from pathlib import Path
from typing import Any

import pytest

from daemon.continuing import check, lineage, one_series, resumed_already
from daemon.items import SubmitError
from daemon.store import JobRecord, Store


def record(job_id: str, tenant: str = "alice", state: str = "submitted", **spec: Any) -> JobRecord:
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


def test_an_ended_jobs_checkpoint_is_found_and_a_planted_link_is_never_followed(
    store: Store, tmp_path: Path
) -> None:
    jobs = tmp_path / "jobs"
    checkpoint(jobs, "ended", 6)
    checkpoint(jobs, "bobs", 3)  # another tenant's
    later = record("next", continue_from="ended")
    check(store, jobs, later, simulated=False, exiting=frozenset())
    with pytest.raises(SubmitError, match="simulated agent"):
        check(store, jobs, later, simulated=True, exiting=frozenset())
    with pytest.raises(SubmitError, match="its processes are still exiting"):
        check(store, jobs, later, simulated=False, exiting=frozenset({"ended"}))
    # Its owner swaps its checkpoints folder for a link to another tenant's: not followed.
    folder = jobs / "ended" / "checkpoints"
    folder.rename(jobs / "ended" / "mine")
    folder.symlink_to(jobs / "bobs" / "checkpoints")
    with pytest.raises(SubmitError, match="job ended left no checkpoint"):
        check(store, jobs, later, simulated=False, exiting=frozenset())
    # A link named as a checkpoint is not one either.
    folder.unlink()
    folder.mkdir()
    (folder / "checkpoint-00000009.pt").symlink_to(jobs / "bobs" / "checkpoints" / "x.pt")
    with pytest.raises(SubmitError, match="job ended left no checkpoint"):
        check(store, jobs, later, simulated=False, exiting=frozenset())


def test_a_completed_job_goes_on_only_with_other_settings(store: Store, tmp_path: Path) -> None:
    store.add_job(record("done"))
    store.update_job("done", 2.0, state="pending")
    store.update_job("done", 2.0, state="starting")
    store.update_job("done", 2.0, state="running")
    store.update_job("done", 3.0, state="completed")
    checkpoint(tmp_path / "jobs", "done", 4)
    again = record("again", command=["python", "train.py"], continue_from="done")
    with pytest.raises(SubmitError, match="nothing left to train; to train on, submit it"):
        check(store, tmp_path / "jobs", again, simulated=False, exiting=frozenset())
    longer = record("longer", command=["python", "train.py", "--epochs", "9"], continue_from="done")
    check(store, tmp_path / "jobs", longer, simulated=False, exiting=frozenset())
    # Its script still saves after its final step: its final checkpoint is written already.
    check(store, tmp_path / "jobs", longer, simulated=False, exiting=frozenset({"done"}))


def test_a_job_resumed_already_points_to_the_job_that_went_on(store: Store, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    ended = store.job("ended")
    assert ended is not None
    resumed_already(store, jobs, ended)  # never resumed
    store.add_job(
        record("branch", command=["python", "train.py", "--lr", "1"], continue_from="ended")
    )
    store.add_job(record("bobs-too", tenant="bob", continue_from="ended"))
    resumed_already(store, jobs, ended)  # a branch of other settings, another tenant's: not
    store.add_job(record("second", continue_from="ended"))
    with pytest.raises(SubmitError) as refused:
        resumed_already(store, jobs, ended)
    assert refused.value.field == "continue_from"
    assert "job ended is being resumed already, as second (submitted)" in refused.value.message
    assert "`stoker resume ended --again`" in refused.value.message
    # It failed before its first checkpoint (a bug, fixed since): resuming again is fine.
    store.update_job("second", 2.0, state="failed")
    resumed_already(store, jobs, ended)
    checkpoint(jobs, "second", 1)  # it had trained on: go on from it instead
    with pytest.raises(SubmitError, match="`stoker resume second` goes on from there"):
        resumed_already(store, jobs, ended)


def test_a_resumed_jobs_lineage_and_metrics_are_one_history(store: Store) -> None:
    # `ended` reported to step 30 and checkpointed at 20; `again` went on from 20 and was
    # cancelled at 50; `third` goes on from there: one series, the retrained steps once.
    store.add_job(record("again", continue_from="ended"))
    store.add_job(record("third", continue_from="again"))
    store.reported.add("ended", [(step, {"loss": 1.0 / step}) for step in (10, 20, 25, 30)])
    store.reported.add("again", [(step, {"loss": 2.0 / step}) for step in (21, 30, 40, 50)])
    store.reported.add("third", [(step, {"loss": 3.0 / step, "lr": 0.1}) for step in (45, 60)])
    assert [job.id for job in lineage(store, "third")] == ["ended", "again", "third"]
    assert [job.id for job in lineage(store, "ended")] == ["ended"]
    merged = one_series([store.reported.series(job) for job in ("ended", "again", "third")])
    assert [step for step, _ in merged["loss"].points] == [10, 20, 21, 30, 40, 45, 60]
    assert merged["loss"].points[-1] == (60, 3.0 / 60)
    assert merged["lr"].points == [(45, 0.1), (60, 0.1)]


def test_a_lineage_that_loops_or_runs_long_is_walked_a_bounded_way(store: Store) -> None:
    store.add_job(record("a", continue_from="b"))
    store.add_job(record("b", continue_from="a"))  # a state dir edited by hand
    assert [job.id for job in lineage(store, "a")] == ["b", "a"]
