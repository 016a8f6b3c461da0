"""A job as the API shows it (`JobView`): its stored record joined with what the service
knows of it live (allocation, rates, curve, phase) and why it is in its state. Every route
that answers a job builds it here, so a submit, a list and a cancel show the same fields.
"""

from typing import Any

from allocator import JobSpec
from daemon.continuing import lineage_of
from daemon.eventlog import EXITED_EVENT
from daemon.schemas import CurveView, JobView
from daemon.service import Service
from daemon.snapshot import LiveJob, NodeSnapshot
from daemon.store import JobRecord, reason_words
from daemon.tenants import ADMIN
from daemon.wording import waiting_words
from scheduler.exits import AfterEnd


def visible_tenant(who: str) -> str | None:
    """The tenant whose jobs `who` sees; None: every tenant's (the admin)."""
    return None if who == ADMIN else who


def _curve(spec: JobSpec) -> CurveView:
    return CurveView(
        step_time_s=spec.step_time_s,
        sample_cost_s=spec.sample_cost_s,
        knee_sharpness=spec.knee_sharpness,
        cpu_cost_s=spec.cpu_cost_s,
        core_share=spec.core_share,
        overhead_s=spec.overhead_s,
    )


def job_view(
    service: Service, record: JobRecord, node: NodeSnapshot | None = None, *, current: bool = False
) -> JobView:
    """The job as the API shows it. `current`: `record` was read from the store in this
    request with no await since, so it is read again only when it may have changed (after a
    submit or a cancel): a page of 500 jobs is one query, not 501."""
    fresh = record if current else service.store.job(record.id) or record
    settings = fresh.settings
    live = node.jobs.get(fresh.id) if node is not None else service.live_job(fresh.id)
    allocation = live.allocation if live is not None else None
    exiting = fresh.id in service.scheduler.exiting
    return JobView(
        id=fresh.id,
        name=fresh.name,
        tenant=fresh.tenant,
        state=fresh.state,
        model=settings.model,
        command=list(settings.command) if settings.command is not None else None,
        workdir=settings.workdir,
        env_names=[name for name, _ in settings.env],
        continue_from=settings.continue_from,
        lineage=[job.id for job in lineage_of(service.store, fresh)],
        gpus=settings.gpus,
        batch_size=settings.batch_size,
        iterations=service.views.length(fresh, live),
        iteration=max(fresh.iteration, live.iteration if live is not None else 0),
        script_batch_size=service.views.script_batch(fresh, live),
        seconds_left=live.seconds_left if live is not None else None,
        gpu_indices=service.views.gpus_held(fresh, live),
        workers_per_gpu=allocation.workers_per_gpu if allocation is not None else None,
        planned_workers_per_gpu=_planned_workers(live),
        predicted_samples_per_s=live.predicted_samples_per_s if live else None,
        measured_samples_per_s=live.measured_samples_per_s if live else None,
        prediction_error=live.relative_error if live else None,
        curve=_curve(live.curve) if live is not None and live.curve is not None else None,
        pause_cost_s=live.pause_cost_s if live is not None else None,
        unmanaged=live is not None and live.unmanaged,
        phase=live.phase if live is not None and not live.state.final else "",
        stalled=live is not None and live.stalled and not live.state.final,
        exiting=exiting,
        **_exit(service, fresh, exiting),
        restarts=fresh.restarts,
        submitted_at=fresh.submitted_at,
        started_at=fresh.started_at,
        ended_at=fresh.ended_at,
        job_dir=str(service.launcher.jobs_dir / fresh.id),
        reason=_reason(service, fresh),
    )


def _exit(service: Service, record: JobRecord, exiting: bool) -> dict[str, Any]:
    """How an ended job's processes last exited (`exit_code`; None: not seen), and whether
    its script failed after its final step (`failed_after_end`), once they have."""
    exited = service.store.last_event(record.id, EXITED_EVENT)
    if not record.job_state.final or exiting or exited is None:
        return {}
    code = exited.get("code")
    after = exited.get("after_end")
    failed = after in (AfterEnd.FAILED.value, AfterEnd.OVERRAN.value)
    return {"exit_code": int(code) if code is not None else None, "failed_after_end": failed}


def _planned_workers(live: LiveJob | None) -> int | None:
    """The workers a round gave the job that its agent has not taken up yet."""
    if live is None or live.planned is None or live.state.final:
        return None
    return live.planned.workers_per_gpu


def _reason(service: Service, record: JobRecord) -> str:
    """Why the job is in its state (its row's typed reason, in daemon/wording.py's words):
    for one submitted and not running yet, what it waits for (a newcomer's job otherwise
    sat 30 s in `submitted`, and a command without the SDK 30 s in `starting`, with no
    word)."""
    if record.state in ("submitted", "starting"):
        waiting = waiting_words(service.scheduler.waiting(record.id, service.now()))
        if waiting is not None:
            return waiting
    return reason_words(record.reason)  # as its row keeps it, typed
