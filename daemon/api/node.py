"""The node-wide routes under /v1: what every running job is allocated and the plans
before, the event log (a page at a time, or streamed as server-sent events), the
throughput model (its status, sample uploads, a refit) and the node's summary. A tenant
sees the figures of its own jobs only; the admin sees all.
"""

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.sse import EventSourceResponse, ServerSentEvent

from daemon.api.jobs import MAX_SEQ
from daemon.api.problems import unprocessable
from daemon.api.views import visible_tenant
from daemon.auth import Daemon, Who, admin_only
from daemon.host import host_summary
from daemon.learning import parse_samples
from daemon.schemas import SampleUpload
from daemon.service import Service
from daemon.stopping import streaming
from daemon.streamcaps import Streams
from daemon.summary import node_summary
from tpm import SampleError, TpmError

_STREAM_POLL_S = 0.25
_STREAM_BATCH = 500  # events a stream reads at once

router = APIRouter(prefix="/v1")


def _mine(service: Service, who: str) -> set[str]:
    return {record.id for record in service.store.jobs(visible_tenant(who))}


@router.get("/allocations")
async def allocations(who: Who, service: Daemon) -> dict[str, Any]:
    """What every running job has now, with its predicted and measured throughput."""
    node = service.snapshot()
    current: dict[str, Any] = {}
    for job in node.live(visible_tenant(who)):
        if job.allocation is None:
            continue
        current[job.id] = {
            "workers_per_gpu": job.allocation.workers_per_gpu,
            "decoder_share": job.allocation.decoder_share,
            "decode_mode": job.allocation.decode_mode,
            "predicted_samples_per_s": job.predicted_samples_per_s,
            "measured_samples_per_s": job.measured_samples_per_s,
            # What the agent said in its last heartbeat: the share it applies now.
            "agent_decoder_share": job.heartbeat.decoder_share if job.heartbeat else None,
        }
    return {"generation": node.generation, "allocations": current}


@router.get("/allocations/history")
async def history(
    who: Who, service: Daemon, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[dict[str, Any]]:
    """The newest plans first, each with the allocations of the caller's jobs."""
    mine = _mine(service, who)
    plans = service.store.plans(limit)
    for plan in plans:
        plan["allocations"] = {k: v for k, v in plan["allocations"].items() if k in mine}
    return plans


@router.get("/events")
async def events(
    who: Who,
    service: Daemon,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
) -> list[dict[str, Any]]:
    """Events with a sequence number above `after`, oldest first: poll with the last one."""
    tenant = visible_tenant(who)  # filtered in SQL, before the limit
    return [vars(event) for event in service.store.events(after=after, limit=limit, tenant=tenant)]


async def _stream_slot(who: Who, request: Request) -> AsyncIterator[None]:
    """One of the caller's event streams, held until its response ends."""
    streams: Streams = request.app.state.streams
    with streams.held(who):
        yield


@router.get("/events/stream", response_class=EventSourceResponse)
async def event_stream(
    who: Who,
    service: Daemon,
    request: Request,
    _slot: Annotated[None, Depends(_stream_slot)],
    after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
) -> AsyncIterator[ServerSentEvent]:
    """The events as they happen (server-sent events, one `data:` JSON object each, `id:`
    its sequence number). A client that reconnects with Last-Event-ID misses nothing. A
    tenant may hold `max_streams_per_tenant` open at once, the node `max_streams`; past
    either, a 429."""
    last = request.headers.get("last-event-id", "")
    resumed = int(last) if last.isascii() and last.isdecimal() and len(last) <= 18 else 0
    seen = max(after, resumed)
    tenant = visible_tenant(who)
    while streaming(request) and not await request.is_disconnected():
        newest = service.store.newest_event
        if newest > seen:  # an idle stream asks SQL nothing (1,500 of them slowed submits)
            batch = service.store.events(after=seen, limit=_STREAM_BATCH, tenant=tenant)
            for event in batch:
                seen = event.seq
                yield ServerSentEvent(data=vars(event), event=event.kind, id=str(event.seq))
            if len(batch) < _STREAM_BATCH:  # the rest up to `newest` is other tenants'
                seen = max(seen, newest)
        await asyncio.sleep(_STREAM_POLL_S)


@router.get("/tpm")
async def tpm_status(who: Who, service: Daemon) -> dict[str, Any]:
    """Where the model came from, its last fit report, the newest refit refused since
    (held-out R^2 too low, or it cannot plan the jobs) with its figures, stored samples,
    and predicted against measured throughput of the caller's running jobs."""
    node = service.snapshot()
    jobs = {
        job.id: {
            "predicted": job.predicted_samples_per_s,
            "measured": job.measured_samples_per_s,
            "relative_error": job.relative_error,
        }
        for job in node.live(visible_tenant(who))
    }
    return {
        "source": node.model_source,
        "report": node.model_report,
        "refused": node.model_refused,
        "samples": service.store.sample_counts(),
        "telemetry_samples": node.counts.telemetry_samples,
        "jobs": jobs,
    }


@router.post("/tpm/samples", status_code=201)
async def tpm_samples(body: SampleUpload, who: Who, service: Daemon) -> dict[str, Any]:
    """Store profiled samples (admin only); a bad row is a 422 naming it."""
    admin_only(who)
    try:
        rows = parse_samples(body.kind, body.csv, body.source)
    except SampleError as error:
        raise unprocessable("csv", str(error)) from None
    await service.add_samples(body.kind, list(rows), body.source)
    return {"added": len(rows), "samples": service.store.sample_counts()}


@router.post("/tpm/fit")
async def tpm_fit(who: Who, service: Daemon) -> dict[str, Any]:
    """Refit on every stored sample (admin only) and plan with the result from now on."""
    admin_only(who)
    try:
        report = await service.refit()
    except TpmError as error:
        raise unprocessable("samples", str(error)) from None
    return {"source": service.snapshot().model_source, "report": report}


@router.get("/node")
async def node(_: Who, service: Daemon) -> dict[str, Any]:
    return node_summary(service.snapshot()) | {"host": host_summary(service.node)}
