"""The REST API under /v1 (DESIGN.md, "Interfaces users touch"). `create_app(config)` builds
the app; its lifespan starts the service (store, agent link, the one writer) and stops it.

Every route needs a token (`daemon/auth.py`: `Authorization: Bearer <token>`, or for reads
the dashboard's cookie) but /healthz, the API's description (/docs, /openapi.json) and the
dashboard's page. A tenant sees and cancels only its own jobs (another
tenant's job is a 404, as if it did not exist); `admin` sees all. The dashboard's page and
its data are `daemon/dashboard.py`.
"""

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError

from allocator import InvalidRequest, JobSpec, ThroughputModel
from daemon import apidocs
from daemon.actions import EXITED_EVENT, AfterEnd
from daemon.auth import (
    Daemon,
    Who,
    admin_only,
    load_tokens,
    redact_tokens_in_access_log,
    visible_job,
)
from daemon.config import DaemonConfig
from daemon.continuing import lineage_of, resumed_already
from daemon.dashboard import data_router, page_router
from daemon.host import host_summary
from daemon.items import IdTaken, QuotaExceeded, Replayed, SubmitError
from daemon.joblogs import router as job_output_router
from daemon.learning import parse_samples
from daemon.metrics import Metrics
from daemon.ratelimit import SubmitRate
from daemon.schemas import CurveView, JobSubmission, JobView, SampleUpload, request_problem
from daemon.service import Service, new_job_id
from daemon.snapshot import NodeSnapshot
from daemon.stopping import streaming
from daemon.store import JobRecord
from daemon.streamcaps import Streams, install_caps
from daemon.summary import node_summary
from daemon.tenants import ADMIN
from scheduler.states import JobState
from tpm import FittedTPM, SampleError, TpmError, UnknownModel

log = logging.getLogger(__name__)

DEFAULT_TPM = Path(__file__).resolve().parent / "assets" / "default-tpm.json"
_STREAM_POLL_S = 0.25
_STREAM_BATCH = 500  # events a stream reads at once
MAX_SEQ = 2**62  # sequence numbers are SQLite integers
DEFAULT_PAGE = 500  # jobs a GET /v1/jobs answers unless told (2,000 were 608 KB at once)
MAX_PAGE = 5000
ID_DRAWS = 5  # a submit whose id is taken draws again this many times at most
TASKS_STOP_S = 5.0  # at a stop, how long the cancelled background tasks may take to end


v1 = APIRouter(prefix="/v1")


def _mine(service: Service, who: str) -> set[str]:
    return {record.id for record in service.store.jobs(_tenant(who))}


@v1.post("/jobs", status_code=201)
async def submit(
    body: JobSubmission,
    who: Who,
    service: Daemon,
    *,
    request: Request,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            min_length=1,
            max_length=200,
            description="a key of the client's choosing: a retry with the same key and body "
            "answers the job the first made (200, Idempotent-Replayed: true), never a second",
        ),
    ] = None,
) -> JobView:
    """Submit a job; it is committed to the state file before this returns. A tenant may
    submit `limits.submits_per_minute` a minute (a 429 with Retry-After past it); a retry
    that an Idempotency-Key answers is not counted."""
    idempotency: tuple[str, str] | None = None
    if idempotency_key is not None:
        canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True)
        idempotency = (idempotency_key, hashlib.sha256(canonical.encode()).hexdigest())
        first = service.store.idempotent(who, idempotency_key)
        if first is not None:
            return _replay(service, response, Replayed(*first), idempotency[1])
    _submits(request).take(who)
    return await _submit(service, _new_record(body, who), response, idempotency)


@v1.post("/jobs/{job_id}/resume", status_code=201)
async def resume(
    job_id: str,
    who: Who,
    service: Daemon,
    *,
    request: Request,
    response: Response,
    again: bool = False,
) -> JobView:
    """Submit an ended job again from its newest checkpoint: a new job of the same settings,
    name and tenant that goes on where it stopped (its `continue_from` names the ended
    one). 422, naming `continue_from`, for a job that has not ended or left no checkpoint,
    or (unless `again`) that was resumed already by a job still running or with
    checkpoints of its own."""
    earlier = visible_job(service, who, job_id)
    _submits(request).take(who)  # a submit as any other
    if not again:
        try:
            resumed_already(service.store, service.launcher.jobs_dir, earlier)
        except SubmitError as error:
            raise _unprocessable(error.field, error.message) from None
    try:
        body = JobSubmission.model_validate({**earlier.spec, "continue_from": earlier.id})
    except ValidationError as error:  # settings this daemon no longer takes
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise _unprocessable(where, f"job {job_id}'s settings: {first['msg']}") from None
    return await _submit(service, _new_record(body, earlier.tenant), response, None)


def _submits(request: Request) -> SubmitRate:
    submits: SubmitRate = request.app.state.submits
    return submits


def _new_record(body: JobSubmission, tenant: str) -> JobRecord:
    now = time.time()
    return JobRecord(
        id=new_job_id(body.name),
        tenant=tenant,
        name=body.name,
        spec=body.model_dump(),
        state="submitted",
        submitted_at=now,
        updated_at=now,
        restarts=0,
        checkpoint="",
        pid=None,
    )


async def _submit(
    service: Service,
    record: JobRecord,
    response: Response,
    idempotency: tuple[str, str] | None,
) -> JobView:
    """Submit `record`; its view, or the HTTP error that names what to change."""
    if not service.accepting:
        raise HTTPException(503, "the daemon is shutting down")
    lost = service.state_lost()
    if lost is not None:  # acknowledged now, it would be gone at the next start
        raise HTTPException(503, lost)
    try:
        record = await submit_under_a_free_id(service, record, idempotency)
    except Replayed as replayed:  # a retry that raced its first submit
        assert idempotency is not None
        return _replay(service, response, replayed, idempotency[1])
    except QuotaExceeded as error:
        raise HTTPException(429, str(error)) from None
    except SubmitError as error:
        raise _unprocessable(error.field, error.message) from None
    except UnknownModel as error:
        raise _unprocessable("model", error.message) from None
    except InvalidRequest as error:
        raise _unprocessable(error.field, error.problem) from None
    except TpmError as error:  # the model cannot predict this job
        raise _unprocessable("model", str(error)) from None
    return _view(service, record)


def _replay(service: Service, response: Response, first: Replayed, digest: str) -> JobView:
    """The job an Idempotency-Key made before, if this retry's body is the same."""
    if first.body_digest != digest:
        raise _unprocessable(
            "Idempotency-Key",
            f"was used for another body (job {first.job_id}); a new job needs a new key",
        )
    record = service.store.job(first.job_id)
    assert record is not None  # committed with its key, never deleted
    response.status_code = 200
    response.headers["Idempotent-Replayed"] = "true"
    return _view(service, record, current=True)


async def submit_under_a_free_id(
    service: Service, record: JobRecord, idempotency: tuple[str, str] | None = None
) -> JobRecord:
    """Submit `record`, drawing a new id while its id is taken; the record submitted."""
    for _ in range(ID_DRAWS):
        try:
            await service.submit(record, idempotency)
            return record
        except IdTaken:
            record = replace(record, id=new_job_id(record.name))
    raise HTTPException(503, f"no free job id in {ID_DRAWS} draws; submit again")


@v1.get("/jobs")
async def jobs(
    who: Who,
    service: Daemon,
    request: Request,
    response: Response,
    *,
    after: Annotated[
        str | None, Query(max_length=400, description="the cursor of the page before")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
    state: Annotated[
        list[JobState] | None, Query(description="only jobs in these states (repeat it)")
    ] = None,
    tenant: Annotated[
        str | None, Query(max_length=128, description="only this tenant's jobs (the admin's)")
    ] = None,
    name: Annotated[str | None, Query(max_length=128, description="only jobs of this name")] = None,
) -> list[JobView]:
    """The caller's jobs (the admin's: all), oldest first, `limit` at a time; only those in
    the `state`s, of the `tenant` and of the `name` given. When more follow, the
    `X-Next-Cursor` header holds the cursor to pass as `after`, and `Link` the next page's
    URL (rel="next")."""
    node = service.snapshot()
    visible = _tenant(who)
    if tenant is not None and visible is not None and tenant != visible:
        return []  # a tenant sees only its own jobs: another's are none of them
    page = service.store.jobs_page(
        visible if tenant is None else tenant,
        _cursor(after),
        limit + 1,
        states=[given.value for given in state or ()],
        name=name,
    )
    if len(page) > limit:
        page = page[:limit]
        cursor = _encode_cursor(page[-1])
        response.headers["X-Next-Cursor"] = cursor
        following = request.url.include_query_params(after=cursor, limit=limit)
        response.headers["Link"] = f'<{following}>; rel="next"'
    return [_view(service, record, node, current=True) for record in page]


def _encode_cursor(record: JobRecord) -> str:
    raw = json.dumps([record.submitted_at, record.id]).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _cursor(after: str | None) -> tuple[float, str] | None:
    """The (submitted_at, id) an `after` cursor stands for; a 422 naming it if it is not
    one of ours."""
    if after is None:
        return None
    try:
        at, job_id = json.loads(base64.urlsafe_b64decode(after.encode()))
        return float(at), str(job_id)
    except (ValueError, TypeError):
        raise _unprocessable("after", "not a cursor from X-Next-Cursor; leave it out") from None


@v1.get("/jobs/{job_id}")
async def job(job_id: str, who: Who, service: Daemon) -> JobView:
    return _view(service, visible_job(service, who, job_id), current=True)


@v1.get("/jobs/{job_id}/events")
async def job_events(
    job_id: str,
    who: Who,
    service: Daemon,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
) -> list[dict[str, Any]]:
    """The job's events with a sequence number above `after`, oldest first, `limit` at a
    time: poll again with the last one's."""
    visible_job(service, who, job_id)
    return [vars(event) for event in service.store.events(job_id, after=after, limit=limit)]


@v1.delete("/jobs/{job_id}")
async def cancel(job_id: str, who: Who, service: Daemon) -> JobView:
    """Cancel a job: its agent is told to stop, and killed if it does not within 5 s. A job
    that ended while its processes run on (`exiting`: a script saving after its final
    step) has them stopped, and its GPUs go to the next job."""
    visible_job(service, who, job_id)
    await service.cancel(job_id, who)
    return _view(service, visible_job(service, who, job_id))


@v1.get("/allocations")
async def allocations(who: Who, service: Daemon) -> dict[str, Any]:
    """What every running job has now, with its predicted and measured throughput."""
    node = service.snapshot()
    current: dict[str, Any] = {}
    for job in node.live(_tenant(who)):
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


@v1.get("/allocations/history")
async def history(
    who: Who, service: Daemon, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[dict[str, Any]]:
    """The newest plans first, each with the allocations of the caller's jobs."""
    mine = _mine(service, who)
    plans = service.store.plans(limit)
    for plan in plans:
        plan["allocations"] = {k: v for k, v in plan["allocations"].items() if k in mine}
    return plans


@v1.get("/events")
async def events(
    who: Who,
    service: Daemon,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
) -> list[dict[str, Any]]:
    """Events with a sequence number above `after`, oldest first: poll with the last one."""
    tenant = _tenant(who)  # filtered in SQL, before the limit
    return [vars(event) for event in service.store.events(after=after, limit=limit, tenant=tenant)]


async def _stream_slot(who: Who, request: Request) -> AsyncIterator[None]:
    """One of the caller's event streams, held until its response ends."""
    streams: Streams = request.app.state.streams
    with streams.held(who):
        yield


@v1.get("/events/stream", response_class=EventSourceResponse)
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
    tenant = _tenant(who)
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


@v1.get("/tpm")
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
        for job in node.live(_tenant(who))
    }
    return {
        "source": node.model_source,
        "report": node.model_report,
        "refused": node.model_refused,
        "samples": service.store.sample_counts(),
        "telemetry_samples": node.counts.telemetry_samples,
        "jobs": jobs,
    }


@v1.post("/tpm/samples", status_code=201)
async def tpm_samples(body: SampleUpload, who: Who, service: Daemon) -> dict[str, Any]:
    """Store profiled samples (admin only); a bad row is a 422 naming it."""
    admin_only(who)
    try:
        rows = parse_samples(body.kind, body.csv, body.source)
    except SampleError as error:
        raise _unprocessable("csv", str(error)) from None
    await service.add_samples(body.kind, list(rows), body.source)
    return {"added": len(rows), "samples": service.store.sample_counts()}


@v1.post("/tpm/fit")
async def tpm_fit(who: Who, service: Daemon) -> dict[str, Any]:
    """Refit on every stored sample (admin only) and plan with the result from now on."""
    admin_only(who)
    try:
        report = await service.refit()
    except TpmError as error:
        raise _unprocessable("samples", str(error)) from None
    return {"source": service.snapshot().model_source, "report": report}


@v1.get("/node")
async def node(_: Who, service: Daemon) -> dict[str, Any]:
    return node_summary(service.snapshot()) | {"host": host_summary(service.node)}


def load_model(config: DaemonConfig) -> FittedTPM:
    """The model to plan with until a refit: `config.tpm`, else the built-in one (fitted on
    the simulated testbed's profiling, docs/daemon.md). TpmError or OSError say why not."""
    path = config.tpm or DEFAULT_TPM
    return FittedTPM.from_json(path.read_text(encoding="utf-8"), str(path))


def create_app(config: DaemonConfig, model: ThroughputModel | None = None) -> FastAPI:
    """The daemon as an ASGI app; serving it starts the service, stopping it stops it.
    `model` defaults to `load_model(config)`; a newer fit in the state file wins over it."""
    model = model or load_model(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        redact_tokens_in_access_log()  # uvicorn's logging is set up by now
        service = Service(config, model)
        service.link.bind()
        app.state.service = service
        app.state.metrics = service.metrics
        tasks = [
            asyncio.create_task(service.run(), name="writer"),
            asyncio.create_task(service.link.serve(service.deliver), name="agent-link"),
            asyncio.create_task(service.refit_periodically(), name="refit"),
            asyncio.create_task(service.cap_logs_periodically(), name="log-cap"),
            asyncio.create_task(service.watch_state(), name="state-watch"),
        ]
        log.info("state in %s, agents on %s", config.state_dir, service.link.endpoint)
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            # Bounded too: a task that does not end when cancelled must not hold the stop up.
            _, stuck = await asyncio.wait(tasks, timeout=TASKS_STOP_S)
            for task in stuck:
                log.error("task %s did not stop when cancelled; stopping without it", task)
            try:  # bounded: a stop must end even if an agent or a socket does not answer
                await asyncio.wait_for(service.shutdown(), config.shutdown_grace_s + 30.0)
            except TimeoutError:
                log.error("shutdown did not finish in time; exiting anyway")

    # max_body_size counts the bytes as they arrive, so a chunked body is bounded too.
    # FastAPI's own /docs and /redoc load their scripts from a CDN: apidocs serves /docs.
    app = FastAPI(
        title="stoker",
        version="0.1.0",
        lifespan=lifespan,
        max_body_size=config.max_body_bytes,
        docs_url=None,
        redoc_url=None,
    )
    _describe_problems(app)
    app.state.tokens = load_tokens(config)
    install_caps(app.state, config)
    app.include_router(v1)
    app.include_router(data_router)
    app.include_router(job_output_router)
    app.include_router(page_router)
    app.include_router(apidocs.router)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        # A job body's fields are what a user types by hand (a job TOML): a misspelt one is
        # told its likely name.
        submit = request.method == "POST" and request.url.path.rstrip("/") == "/v1/jobs"
        fields = tuple(JobSubmission.model_fields) if submit else ()
        problems = [
            request_problem(
                tuple(item["loc"]), item["type"], item["msg"], fields, item.get("input")
            )
            for item in error.errors()
        ]
        return JSONResponse({"detail": problems}, status_code=422)

    @app.middleware("http")
    async def timed(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        metrics: Metrics | None = getattr(request.app.state, "metrics", None)
        if metrics is not None and route is not None:
            metrics.rest_latency.labels(
                request.method, getattr(route, "path", "?"), str(response.status_code)
            ).observe(time.perf_counter() - started)
        return response

    @app.get("/healthz")
    async def healthz(request: Request) -> JSONResponse:
        """200 while the daemon can keep what it accepts; 503 with the reason once its
        state file was deleted or replaced."""
        service: Service | None = getattr(request.app.state, "service", None)
        lost = service.state_lost() if service is not None else None
        if lost is not None:
            return JSONResponse({"status": "state lost", "detail": lost}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics(request: Request, who: Who) -> Response:
        """Prometheus exposition, with the admin token (Prometheus' `authorization`
        scrape setting): it names every tenant's jobs."""
        admin_only(who)
        registry = request.app.state.metrics.registry
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app


# What a 422's `detail` lists: the shape `invalid` and `_unprocessable` answer, not
# FastAPI's own loc/msg/type, which the schema would otherwise advertise.
PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "type": "object",
    "required": ["field", "message"],
    "properties": {
        "field": {"type": "string", "description": "the request field at fault, dotted"},
        "message": {"type": "string", "description": "what is wrong with it, and the fix"},
    },
}


def _describe_problems(app: FastAPI) -> None:
    """Make the OpenAPI schema describe the 422 bodies this API sends."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()
        schemas = schema.get("components", {}).get("schemas", {})
        if "ValidationError" in schemas:
            schemas["ValidationError"] = PROBLEM_SCHEMA
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _unprocessable(field: str, message: str) -> HTTPException:
    return HTTPException(422, [{"field": field, "message": message}])


def _tenant(who: str) -> str | None:
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


def _view(
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
        iterations=service.length(fresh, live),
        iteration=max(fresh.iteration, live.iteration if live is not None else 0),
        script_batch_size=service.script_batch(fresh, live),
        seconds_left=live.seconds_left if live is not None else None,
        gpu_indices=service.gpus_held(fresh, live),
        workers_per_gpu=allocation.workers_per_gpu if allocation is not None else None,
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


def _reason(service: Service, record: JobRecord) -> str:
    """Why the job is in its state: for one submitted and not running yet, what it waits
    for (a newcomer's job otherwise sat 30 s in `submitted`, and a command without the SDK
    30 s in `starting`, with no word)."""
    if record.state in ("submitted", "starting"):
        waiting = service.scheduler.waiting(record.id, service.now())
        if waiting is not None:
            return waiting
    return service.store.reason(record.id)
