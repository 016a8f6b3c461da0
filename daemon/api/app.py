"""The app factory: `create_app(config)` assembles the routers, the 422 handler, the
latency middleware and the probes (/healthz, /metrics), and its lifespan starts the service
(store, agent link, the one writer and the background loops) and stops it, bounded.
`load_model` reads the model the daemon plans with until a refit.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from allocator import ThroughputModel
from daemon import apidocs
from daemon.api import jobs, node
from daemon.api.problems import describe_problems, invalid
from daemon.auth import Who, admin_only, load_tokens, redact_tokens_in_access_log
from daemon.config import DaemonConfig
from daemon.dashboard import data_router, page_router
from daemon.joblogs import router as job_output_router
from daemon.launcher import Launcher
from daemon.metrics import Metrics
from daemon.service import Service
from daemon.streamcaps import install_caps
from tpm import FittedTPM

log = logging.getLogger(__name__)

DEFAULT_TPM = Path(__file__).resolve().parents[1] / "assets" / "default-tpm.json"
TASKS_STOP_S = 5.0  # at a stop, how long the cancelled background tasks may take to end

Lifespan = Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]

# What monitors read, outside /v1: registered last, as they always were.
probes = APIRouter()


def load_model(config: DaemonConfig) -> FittedTPM:
    """The model to plan with until a refit: `config.tpm`, else the built-in one (fitted on
    the simulated testbed's profiling, docs/daemon.md). TpmError or OSError say why not."""
    path = config.tpm or DEFAULT_TPM
    return FittedTPM.from_json(path.read_text(encoding="utf-8"), str(path))


def create_app(
    config: DaemonConfig, model: ThroughputModel | None = None, launcher: Launcher | None = None
) -> FastAPI:
    """The daemon as an ASGI app; serving it starts the service, stopping it stops it.
    `model` defaults to `load_model(config)`; a newer fit in the state file wins over it.
    `launcher`: where job processes start (the host's, unless given)."""
    model = model or load_model(config)
    # max_body_size counts the bytes as they arrive, so a chunked body is bounded too.
    # FastAPI's own /docs and /redoc load their scripts from a CDN: apidocs serves /docs.
    app = FastAPI(
        title="stoker",
        version="0.1.0",
        lifespan=_lifespan(config, model, launcher),
        max_body_size=config.max_body_bytes,
        docs_url=None,
        redoc_url=None,
    )
    describe_problems(app)
    app.state.tokens = load_tokens(config)
    install_caps(app.state, config)
    app.include_router(jobs.router)
    app.include_router(node.router)
    app.include_router(data_router)
    app.include_router(job_output_router)
    app.include_router(page_router)
    app.include_router(apidocs.router)
    app.exception_handler(RequestValidationError)(invalid)
    app.middleware("http")(timed)
    app.include_router(probes)
    return app


def _lifespan(config: DaemonConfig, model: ThroughputModel, launcher: Launcher | None) -> Lifespan:
    """The app's lifespan: the service runs while the app is served."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        redact_tokens_in_access_log()  # uvicorn's logging is set up by now
        service = Service(config, model, launcher=launcher, plan_off_loop=True)
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

    return lifespan


async def timed(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    """Observe each routed request's latency, by method, route and status."""
    started = time.perf_counter()
    response = await call_next(request)
    route = request.scope.get("route")
    metrics: Metrics | None = getattr(request.app.state, "metrics", None)
    if metrics is not None and route is not None:
        metrics.rest_latency.labels(
            request.method, getattr(route, "path", "?"), str(response.status_code)
        ).observe(time.perf_counter() - started)
    return response


@probes.get("/healthz")
async def healthz(request: Request) -> JSONResponse:
    """200 while the daemon can keep what it accepts; 503 with the reason once its
    state file was deleted or replaced."""
    service: Service | None = getattr(request.app.state, "service", None)
    lost = service.state_lost() if service is not None else None
    if lost is not None:
        return JSONResponse({"status": "state lost", "detail": lost}, status_code=503)
    return JSONResponse({"status": "ok"})


@probes.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request, who: Who) -> Response:
    """Prometheus exposition, with the admin token (Prometheus' `authorization`
    scrape setting): it names every tenant's jobs."""
    admin_only(who)
    registry = request.app.state.metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
