"""A job that goes on from where an ended one stopped: it starts from that job's newest
checkpoint (its model, optimizer, epoch and data position) instead of from scratch
(`continue_from`; `stoker resume ID` submits the ended job's own settings so).

The checkpoint is checked at submit, so that a job that cannot go on is refused at once, and
put in the new job's own checkpoint folder at its first launch (a hard link: a checkpoint of
gigabytes is not copied by the daemon's one writer). The SDK then finds it there as it finds
its own after a restart; the ended job's folder is left as it was.
"""

import logging
import os
from pathlib import Path

from agents.protocol import CHECKPOINTS, newest_checkpoint
from daemon.items import SubmitError
from daemon.jobspec import JobSettings
from daemon.store import JobRecord, Store
from daemon.tenants import ADMIN

log = logging.getLogger(__name__)


class ContinueFailed(Exception):
    """The ended job's checkpoint could not be put in place at launch."""


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
    if earlier_id in exiting:
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


def seed(jobs_dir: Path, job_id: str, settings: JobSettings) -> Path | None:
    """Before a launch: put the newest checkpoint of the job `settings` continues in the
    job's own checkpoint folder, unless the job has one of its own already (a relaunch);
    the checkpoint put there, or None. ContinueFailed says why it could not be."""
    earlier_id = settings.continue_from
    if earlier_id is None:
        return None
    folder = jobs_dir / job_id / CHECKPOINTS
    if newest_checkpoint(folder) is not None:
        return None
    found = newest_checkpoint(jobs_dir / earlier_id / CHECKPOINTS)
    if found is None:
        raise ContinueFailed(
            f"job {earlier_id}'s checkpoints are gone from {jobs_dir / earlier_id / CHECKPOINTS};"
            " submit it afresh"
        )
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    placed = folder / found.name
    try:
        os.link(found, placed, follow_symlinks=False)
    except OSError as error:
        raise ContinueFailed(f"could not take job {earlier_id}'s {found.name}: {error}") from None
    log.info("job %s: starts from job %s's %s", job_id, earlier_id, found.name)
    return placed
