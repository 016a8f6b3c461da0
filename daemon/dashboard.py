"""The allocation dashboard at `/`: the page, its assets, and `/v1/dashboard`, its data.

`stoker dashboard` prints a link `/?token=...`; opening it exchanges the token for an
HttpOnly, SameSite=Strict cookie and redirects to `/`, so the token leaves the address bar
and no script can read it. The page then reads `/v1/dashboard` (one JSON snapshot of what it
draws, for the cookie's tenant: its own jobs, or all for the admin) and listens to
`/v1/events/stream`, refreshing the snapshot when something happens.

Charts are drawn by plotly.js, the copy bundled in the `plotly` Python package (installed
from PyPI with the daemon, served from `/assets/plotly.min.js`: no CDN at page load).
"""

import bisect
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from importlib.resources import files
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from daemon.auth import COOKIE, Daemon, Who, tenant_of
from daemon.service import Service
from daemon.snapshot import NodeSnapshot
from daemon.store import EventRecord, JobRecord
from daemon.summary import node_summary
from daemon.tenants import ADMIN
from tpm.validation import r_squared

ASSETS = Path(str(files("daemon") / "assets" / "dashboard"))


def _plotly_js() -> Path:
    """plotly.min.js inside the installed `plotly` package, found without importing it."""
    spec = find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the plotly package is missing: `make install` installs it")
    return Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"


PLOTLY_JS = _plotly_js()
_FILES = {
    "dashboard.js": (ASSETS / "dashboard.js", "text/javascript"),
    "dashboard.css": (ASSETS / "dashboard.css", "text/css"),
    "plotly.min.js": (PLOTLY_JS, "text/javascript"),
}
_EVENTS = 20_000  # the newest events the timeline is drawn from
_PLANS = 1_000
_ENDED_SHOWN = 200  # ended jobs drawn beside the live ones, the newest; a node keeps thousands
# States whose arrival the timeline marks (`resume` is resuming -> running, `arrival` the
# submission).
_MARKS = {
    "pausing": "pause",
    "completed": "finish",
    "failed": "failure",
    "cancelled": "cancel",
}
_SIGN_IN = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>stoker: sign in</title><link rel="stylesheet" href="/assets/dashboard.css"></head>
<body class="sign-in"><main><h1>stoker</h1><p>{problem}</p>
<p>Open the link <code>stoker dashboard</code> prints: it carries your token.</p></main>
</body></html>"""

page_router = APIRouter(include_in_schema=False)
_INLINE_AT = '<script src="/assets/dashboard.js" defer></script>'  # the snapshot goes before it
data_router = APIRouter(prefix="/v1")


@page_router.get("/")
async def page(request: Request, service: Daemon, token: str | None = None) -> Response:
    """The dashboard; `?token=` trades a token for the cookie and comes back here. The page
    carries the node as it is now, so its first paint draws it (a headless browser's
    screenshot, a slow link) before the live updates connect."""
    tokens: dict[str, str] = request.app.state.tokens
    if token is not None:
        if tenant_of(tokens, token) is None:
            return HTMLResponse(_SIGN_IN.format(problem="That link's token is wrong."), 401)
        back = RedirectResponse("/", status_code=303)
        back.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
        return back
    who = tenant_of(tokens, request.cookies.get(COOKIE, ""))
    if who is None:
        return HTMLResponse(_SIGN_IN.format(problem="You are not signed in."), 401)
    html = (ASSETS / "index.html").read_text()
    try:
        now = json.dumps(await dashboard(who, service), allow_nan=False, default=str)
    except ValueError:  # a value JSON cannot hold: the page asks for the snapshot itself
        return HTMLResponse(html, headers={"Cache-Control": "no-store"})
    # Inside <script>, "<" could close the element: what a tenant named its job is data.
    safe = now.replace("<", "\\u003c")
    inline = f'<script type="application/json" id="snapshot">{safe}</script>'
    html = html.replace(_INLINE_AT, inline + "\n  " + _INLINE_AT)
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})


@page_router.get("/assets/{name}")
async def asset(name: str) -> Response:
    known = _FILES.get(name)
    if known is None:
        return Response("no such asset", status_code=404, media_type="text/plain")
    path, media_type = known
    return FileResponse(path, media_type=media_type, headers={"Cache-Control": "max-age=3600"})


@data_router.get("/dashboard")
async def dashboard(who: Who, service: Daemon) -> dict[str, Any]:
    """Everything the dashboard draws, for the caller's jobs (all of them for admin)."""
    records, older = service.store.shown_jobs(None if who == ADMIN else who, ended=_ENDED_SHOWN)
    mine = {record.id for record in records}
    node = service.snapshot()
    events = service.store.events(after=_newest_events(service), limit=_EVENTS)
    plans = [plan for plan in reversed(service.store.plans(_PLANS))]
    names = Counter(record.name for record in records)
    return {
        "tenant": who,
        "node": _node(node, mine),
        "jobs": [_job(service, node, record, names[record.name] > 1) for record in records],
        "older_jobs": older,  # ended jobs not shown: `stoker jobs` pages through them all
        "timeline": timelines(records, [e for e in events if e.job_id in mine], plans),
        "gpus": gpu_idle(node),
        "tpm": _tpm(node, mine),
        # Node-wide events (plans) name every tenant's jobs: the admin's only, as in /v1/events.
        "events": [
            vars(e) for e in events if e.job_id in mine or (e.job_id is None and who == ADMIN)
        ][-200:],
        "last_event": events[-1].seq if events else 0,
    }


def timelines(
    records: Iterable[JobRecord], events: Sequence[EventRecord], plans: Sequence[dict[str, Any]]
) -> dict[str, dict[str, list[Any]]]:
    """Per job, `steps`: [time, workers per GPU, decoder share] from each change on (0
    while it does not run), and `marks`: [time, arrival|pause|resume|finish|failure|cancel].

    A job runs with the newest plan's allocation that names it when it starts or resumes;
    a live share change moves its share alone. `plans` oldest first."""
    plan_times = [plan["at"] for plan in plans]
    result: dict[str, dict[str, list[Any]]] = {
        record.id: {
            "steps": [[record.submitted_at, 0, 0.0]],
            "marks": [[record.submitted_at, "arrival"]],
        }
        for record in records
    }
    current: dict[str, tuple[int, float]] = {}
    for event in events:
        job = result.get(event.job_id or "")
        if job is None:
            continue
        job_id = str(event.job_id)
        if event.kind == "share" and job_id in current:
            workers, _ = current[job_id]
            current[job_id] = (workers, float(event.data.get("share", 0.0)))
            job["steps"].append([event.at, workers, current[job_id][1]])
        if event.kind != "state":
            continue
        before, after = event.data.get("from"), event.data.get("to")
        if after == "running":
            current[job_id] = _planned(job_id, event.at, plans, plan_times)
            job["steps"].append([event.at, *current[job_id]])
            if before == "resuming":
                job["marks"].append([event.at, "resume"])
        elif before == "running" or (after in _MARKS and job_id in current):
            current.pop(job_id, None)
            job["steps"].append([event.at, 0, 0.0])
        if after in _MARKS:
            job["marks"].append([event.at, _MARKS[str(after)]])
    return result


def _planned(
    job_id: str, at: float, plans: Sequence[dict[str, Any]], plan_times: Sequence[float]
) -> tuple[int, float]:
    """Workers per GPU and share of the newest plan at or before `at` that names the job."""
    for index in range(bisect.bisect_right(plan_times, at) - 1, -1, -1):
        allocation = plans[index]["allocations"].get(job_id)
        if allocation is not None:
            return int(allocation["workers_per_gpu"]), float(allocation.get("decoder_share", 0.0))
    return 1, 0.0


def _newest_events(service: Service) -> int:
    """The sequence number after which the newest `_EVENTS` events begin."""
    return max(0, service.store.last_event_seq() - _EVENTS)


def _job(
    service: Service, node: NodeSnapshot, record: JobRecord, shared_name: bool
) -> dict[str, Any]:
    """One job as the dashboard draws it. `shared_name`: another job has its name, so its
    label (legends, table, bars) adds the end of its id."""
    live = node.jobs.get(record.id)
    allocation = live.allocation if live is not None else None
    fresh = service.store.job(record.id) or record
    settings = record.settings
    return {
        "id": record.id,
        "name": record.name,
        "label": f"{record.name} ({record.id[-6:]})" if shared_name else record.name,
        "tenant": record.tenant,
        "state": fresh.state,
        "model": settings.model,
        "gpus": settings.gpus,
        "gpu_indices": service.views.gpus_held(fresh, live),
        "exiting": record.id in service.scheduler.exiting,  # ended; its processes run on
        "phase": live.phase if live is not None and not live.state.final else "",
        "stalled": live is not None and live.stalled and not live.state.final,
        "iteration": max(fresh.iteration, live.iteration if live is not None else 0),
        "iterations": service.views.length(fresh, live),
        "seconds_left": live.seconds_left if live is not None else None,
        "workers_per_gpu": allocation.workers_per_gpu if allocation else None,
        "decoder_share": allocation.decoder_share if allocation else None,
        "decode_mode": allocation.decode_mode if allocation else None,
        "predicted_samples_per_s": live.predicted_samples_per_s if live else None,
        "measured_samples_per_s": live.measured_samples_per_s if live else None,
        "prediction_error": live.relative_error if live else None,
    }


def _node(node: NodeSnapshot, mine: set[str]) -> dict[str, Any]:
    """What the node offers and what all jobs use (totals, so no tenant's job is named)."""
    live = node.live()
    share = sum(job.allocation.decoder_share for job in live if job.allocation)
    return {
        **node_summary(node),
        "decoder_capacity": node.decoder_capacity,
        "decoder_share_allocated": share,
        # Holding workers (starting to resuming); the queued are `jobs_waiting_for_gpus`.
        "jobs_running": sum(1 for job in live if job.id in mine and job.state.holds_resources),
    }


def gpu_idle(node: NodeSnapshot) -> list[dict[str, Any]]:
    """Per GPU (or CPU training slot): the share of time its running jobs waited for input,
    as their last heartbeats measured it (1 when none has measured yet); how many running
    jobs it holds, and how many ended jobs whose processes still keep it."""
    kind = "GPU" if node.uses_gpus else "CPU slot"
    waits: dict[int, list[float]] = {index: [] for index in range(node.slots)}
    running = dict.fromkeys(range(node.slots), 0)
    exiting = dict.fromkeys(range(node.slots), 0)
    for job in node.live():
        for index in job.gpu_indices:
            if index in running:
                running[index] += 1
                if job.heartbeat is not None:
                    waits[index].append(job.heartbeat.idle_fraction)
    for indices in node.exiting_gpus.values():
        for index in indices:
            if index in exiting:
                exiting[index] += 1
    return [
        {
            "name": f"{kind} {index}",
            "idle_fraction": sum(found) / len(found) if found else 1.0,
            "jobs": running[index],
            "exiting": exiting[index],
        }
        for index, found in waits.items()
    ]


def _tpm(node: NodeSnapshot, mine: set[str]) -> dict[str, Any]:
    """The model's own held-out R^2 and, for the caller's running jobs, predicted against
    measured throughput with its R^2."""
    points = [
        {"job": job.id, "predicted": job.predicted_samples_per_s, "measured": measured}
        for job in node.live()
        if job.id in mine
        and job.predicted_samples_per_s
        and (measured := job.measured_samples_per_s) is not None
    ]
    live_r2 = None
    if len(points) >= 2:
        live_r2 = r_squared(
            np.array([p["measured"] for p in points]), np.array([p["predicted"] for p in points])
        )
    report = node.model_report
    training = report.get("training", {})
    chosen = training.get("chosen")
    return {
        "source": node.model_source,
        "training_candidate": chosen,
        "training_r2": training.get("candidates", {}).get(chosen, {}).get("r2"),
        "loading_r2": report.get("loading", {}).get("r2"),
        "jobs": points,
        "live_r2": live_r2,
        "refused": dict(node.model_refused) if node.model_refused else None,
    }
