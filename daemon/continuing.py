"""A job that goes on from where an ended one stopped: it starts from that job's newest
checkpoint (its model, optimizer, epoch and data position) instead of from scratch
(`continue_from`; `stoker resume ID` submits the ended job's own settings so).

The ended job's checkpoints are looked for at submit, so that a job that cannot go on is
refused at once; the job itself reads them (`STOKER_CONTINUE_FROM`), as its tenant's user,
until it has checkpoints of its own. The daemon never opens, links or copies a checkpoint in
a folder a tenant owns: a root daemon following a link planted there could reach another
tenant's files. The ended job's folder is left as it was.
"""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agents.protocol import CHECKPOINTS, newest_checkpoint
from daemon.items import SubmitError
from daemon.reported import Series
from daemon.store import JobRecord, Store
from daemon.tenants import ADMIN
from scheduler.states import JobState

# A job's lineage is walked this far back at most: a chain of resumes is bounded by what a
# tenant submits, but a read must not be.
MAX_LINEAGE = 100


def lineage(store: Store, job_id: str) -> list[JobRecord]:
    """The job and the ended ones it goes on from (`continue_from`, `stoker resume`),
    oldest first, `MAX_LINEAGE` at most: one job's history, as Slurm's requeue keeps one
    id."""
    return lineage_of(store, store.job(job_id))


def lineage_of(store: Store, record: JobRecord | None) -> list[JobRecord]:
    """`lineage` from the job's record (no query for a job that goes on from none)."""
    chain: list[JobRecord] = []
    seen: set[str] = set()
    current = record
    while current is not None and current.id not in seen and len(chain) < MAX_LINEAGE:
        chain.append(current)
        seen.add(current.id)
        earlier = current.settings.continue_from
        current = store.job(earlier) if earlier else None
    return chain[::-1]


def one_series(segments: list[dict[str, Series]]) -> dict[str, Series]:
    """The reported series of a lineage's jobs (oldest first) as one: each job's points up to
    the first step its continuation reported (the steps after its last checkpoint were
    trained again), then the continuation's."""
    merged: dict[str, Series] = {}
    for segment in segments:
        starts = [found.points[0][0] for found in segment.values() if found.points]
        cut = min(starts, default=None)
        for name, found in merged.items():
            if cut is not None:
                merged[name] = Series([p for p in found.points if p[0] < cut], found.stride)
        for name, found in segment.items():
            earlier = merged.get(name)
            points = (earlier.points if earlier else []) + found.points
            merged[name] = Series(points, max(found.stride, earlier.stride if earlier else 1))
    return merged


def check(
    store: Store, jobs_dir: Path, record: JobRecord, *, simulated: bool, exiting: frozenset[str]
) -> None:
    """Refuse, naming `continue_from`, a job that cannot go on from the one it names: no
    ended job of its tenant's by that id, one whose processes are still `exiting` (a
    cancelled script writes its last checkpoint as it leaves), or one with no checkpoint of
    the SDK's."""
    earlier_id = record.settings.continue_from
    if earlier_id is None:
        return
    earlier = store.job(earlier_id)
    if earlier is not None and earlier.tenant != record.tenant and record.tenant == ADMIN:
        raise SubmitError(
            "continue_from",
            f"job {earlier_id} is {earlier.tenant}'s, and a job goes on only as its tenant's:"
            f" `stoker resume {earlier_id}` submits it again as {earlier.tenant}'s",
        )
    if earlier is None or earlier.tenant != record.tenant:
        raise SubmitError(
            "continue_from", f"no job {earlier_id!r} of yours; `stoker jobs` lists them"
        )
    if not earlier.job_state.final:
        raise SubmitError(
            "continue_from",
            f"job {earlier_id} is {earlier.state}; it can be continued once it has ended"
            f" (`stoker cancel {earlier_id}` stops it, with a checkpoint if its script uses"
            " the stoker SDK)",
        )
    if earlier.job_state is JobState.COMPLETED and _same(earlier.spec, record.spec):
        raise SubmitError(
            "continue_from",
            f"job {earlier_id} completed: with the same settings there is nothing left to"
            " train; to train on, submit it with more epochs (or iterations) and"
            f" `--continue-from {earlier_id}`",
        )
    # A completed job wrote its final checkpoint before its `finished` (work after it is
    # the script's own); a cancelled or failed one may still be writing its last.
    if earlier_id in exiting and earlier.job_state is not JobState.COMPLETED:
        raise SubmitError(
            "continue_from",
            f"job {earlier_id} has ended but its processes are still exiting (writing their"
            " last checkpoint, say); submit again once they have, in a few seconds",
        )
    if simulated:
        raise SubmitError(
            "continue_from", "a simulated agent keeps no model to go on from; submit it afresh"
        )
    if newest_checkpoint(jobs_dir / earlier_id / CHECKPOINTS) is None:
        raise SubmitError(
            "continue_from",
            f"job {earlier_id} left no checkpoint (it ran without the stoker SDK, or ended"
            " before its first); submit it afresh",
        )


def resumed_already(store: Store, jobs_dir: Path, earlier: JobRecord) -> None:
    """Refuse, naming `continue_from`, to resume `earlier` a second time with its own
    settings when a job of its tenant's that went on from it is still queued or running, or
    has a checkpoint of its own: the user most likely meant to go on from that job. A job
    that went on and failed before its first checkpoint does not count (resuming again,
    after a fix, is what it asks for)."""
    later = [
        job
        for job in store.continued_by(earlier.id)
        if job.tenant == earlier.tenant and _same(job.spec, earlier.spec)
    ]
    for job in later:
        if not job.job_state.final:
            raise SubmitError(
                "continue_from",
                f"job {earlier.id} is being resumed already, as {job.id} ({job.state});"
                f" `stoker resume {earlier.id} --again` starts another from its checkpoint",
            )
        if newest_checkpoint(jobs_dir / job.id / CHECKPOINTS) is not None:
            raise SubmitError(
                "continue_from",
                f"job {earlier.id} was resumed already, as {job.id} ({job.state}, with"
                f" checkpoints of its own): `stoker resume {job.id}` goes on from there;"
                f" `stoker resume {earlier.id} --again` starts again from {earlier.id}'s",
            )


def _same(earlier: Mapping[str, Any], later: Mapping[str, Any]) -> bool:
    """Whether two jobs' settings run the same training (their names and what each
    continues aside)."""
    aside = ("name", "continue_from")
    return {k: v for k, v in earlier.items() if k not in aside} == {
        k: v for k, v in later.items() if k not in aside
    }
