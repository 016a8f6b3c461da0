"""A submitted job checked at the edge, before anything is written: its folders inside its
tenant's roots, its command startable, its GPUs on the node, everything the core will ask of
it plannable, its dataset usable, a continuation's earlier run resumable (`check`); then,
by the one writer so that no two submits race, the refusals that depend on what is stored:
a replayed Idempotency-Key, a taken id, a full queue (`refusal`)."""

import asyncio
import os

from daemon import continuing
from daemon.agentargs import own_ranks, unstartable
from daemon.items import IdTaken, QuotaExceeded, Replayed, SubmitError, resolve
from daemon.parts import Parts
from daemon.store import JobRecord
from daemon.tenants import UnixUser
from daemon.workdirs import checked_workdir, inside_roots
from daemon.zoodata import check_dataset
from scheduler.messages import JobSubmitted


def check(parts: Parts, users: dict[str, UnixUser], record: JobRecord) -> None:
    """Refuse (SubmitError, UnknownModel, InvalidRequest, ...) a job that cannot run here;
    its workdir resolved once into its spec: every launch uses what was checked."""
    settings = record.settings
    # The tenant's folders first: a refusal says nothing of what exists outside them.
    policy, where = parts.config.tenant(record.tenant), f"tenants.{record.tenant}"
    if settings.workdir is not None:
        user = users.get(record.tenant)
        record.spec["workdir"] = checked_workdir(settings.workdir, policy, user, record.tenant)
    if settings.dataset is not None:
        roots, setting = policy.dataset_roots, f"{where}.dataset_roots"
        inside_roots("dataset", settings.dataset, roots, setting)
    if (why := own_ranks(settings) or unstartable(settings, os.environ)) is not None:
        raise SubmitError("command", why)
    _check_gpus(parts, record)
    # Everything the core will ask of the job, checked before anything is written:
    # UnknownModel or InvalidRequest name the field.
    parts.tpm.rates.job_spec(parts.jobs.request(record))
    # Only the zoo trainer reads a dataset folder; a command job brings its own data.
    if parts.config.agent_mode == "process" and not settings.is_command:
        check_dataset(parts.jobs.dataset(settings), settings.batch_size)
    continuing.check(
        parts.store,
        parts.launcher.jobs_dir,
        record,
        simulated=parts.jobs.simulated(settings),
        exiting=parts.scheduler.exiting,
    )


def _check_gpus(parts: Parts, record: JobRecord) -> None:
    """The GPUs (or CPU training slots) the job asks for exist on the node."""
    settings, slots, uses_gpus = record.settings, parts.node.slots, parts.uses_gpus
    if settings.gpus > slots:
        fix = (
            "ask for at most that"
            if uses_gpus
            else "ask for at most that, or give the daemon more with node.cpu_slots"
            " (STOKER_NODE__CPU_SLOTS)"
        )
        unit = "GPUs" if uses_gpus else "CPU training slots"
        raise SubmitError("gpus", f"the node has {slots} {unit}; {fix}")
    if settings.gpus > settings.batch_size:  # after the node's count: the first to fix
        raise SubmitError("gpus", f"{settings.gpus} GPUs need a batch_size of at least that")
    pinned = settings.gpu_indices
    if pinned is not None and any(index >= slots for index in pinned):
        raise SubmitError("gpu_indices", f"GPUs are numbered 0 to {slots - 1}")


def commit(
    parts: Parts,
    record: JobRecord,
    done: asyncio.Future[None],
    idempotency: tuple[str, str] | None,
) -> None:
    """Commit a new job and hand it to the core, or refuse it (`refusal`). Done by the one
    writer, so that no two submits race past any of the refusals."""
    refused = refusal(parts, record, idempotency)
    if refused is not None:
        if not done.done():
            done.set_exception(refused)
        return
    parts.store.add_job(record, idempotency)  # committed before the reply
    parts.jobs.records[record.id] = record
    resolve(done)
    parts.feed(JobSubmitted(parts.jobs.request(record)))


def refusal(
    parts: Parts, record: JobRecord, idempotency: tuple[str, str] | None
) -> Exception | None:
    """Why the writer refuses to commit the job: its Idempotency-Key made a job already
    (Replayed), its id is taken (the caller draws another, api.py) or its tenant's queue
    is full; None: commit it."""
    store = parts.store
    first = store.idempotent(record.tenant, idempotency[0]) if idempotency else None
    if first is not None:
        return Replayed(*first)
    if record.id in parts.jobs.records or store.job(record.id) is not None:
        return IdTaken(record.id)
    return _over_quota(parts, record.tenant)


def queued(parts: Parts, tenant: str) -> int:
    """`tenant`'s jobs waiting for GPUs (or CPU slots): what max_queued_jobs counts."""
    records = parts.jobs.records
    return sum(
        1
        for job_id in parts.scheduler.waiting_for_gpus
        if (record := records.get(job_id)) is not None and record.tenant == tenant
    )


def _over_quota(parts: Parts, tenant: str) -> QuotaExceeded | None:
    most = parts.config.tenant(tenant).max_queued_jobs
    if queued(parts, tenant) < most:
        return None
    return QuotaExceeded(
        f"{tenant} has {most} jobs waiting (tenants.{tenant}.max_queued_jobs); submit "
        "again when some have started, or ask the operator for a larger quota"
    )
