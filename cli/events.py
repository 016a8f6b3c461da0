"""`stoker events [ID] [-f]`: what happened on the node, or to one job, a line an event
(Kubernetes' `kubectl get events`, Slurm's `sacct` of a job's steps): states and why,
plans, restarts, stalls, resumes, exits."""

import json
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any

import typer

from cli.connection import Daemon, StateDir, Token, Url
from cli.job_state import FINAL_STATES

POLL_S = 1.0  # a follow asks for new events this often
_PAGE = 1000


def register_events(app: typer.Typer) -> None:
    app.command("events")(events)


def events(
    job_id: Annotated[
        str | None, typer.Argument(metavar="[ID]", help="one job's; all you may see without")
    ] = None,
    *,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="then print new ones as they come (a job's: until it ends)"
        ),
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="one JSON object a line")] = False,
    url: Url = None,
    token: Token = None,
    state_dir: StateDir = None,
) -> None:
    """The events the token may see, oldest first, a line each: when, which job, what (a
    state and why, a plan, a restart, a stall, a resume, an exit)."""
    daemon = Daemon(url, token, state_dir)
    path = f"/v1/jobs/{job_id}/events" if job_id else "/v1/events"
    for event in _events(daemon, path, job_id, follow):
        if json_output:
            typer.echo(json.dumps(event))
        else:
            typer.echo(line(event))


def _events(daemon: Daemon, path: str, job_id: str | None, follow: bool) -> Iterator[Any]:
    """Every event at `path`, page by page; with `follow`, new ones as they come, until the
    job (if one) has ended and said all."""
    after = 0
    while True:
        batch = daemon.call("GET", path, params={"after": after, "limit": _PAGE})
        yield from batch
        if batch:
            after = batch[-1]["seq"]
        if len(batch) == _PAGE:
            continue
        if not follow:
            return
        if job_id and daemon.call("GET", f"/v1/jobs/{job_id}")["state"] in FINAL_STATES:
            ended = daemon.call("GET", path, params={"after": after, "limit": _PAGE})
            yield from ended  # what came between the last page and the look
            return
        time.sleep(POLL_S)


def line(event: dict[str, Any]) -> str:
    """`HH:MM:SS  job  kind  what`, with the job's id as the other commands take it."""
    when = datetime.fromtimestamp(event["at"]).strftime("%H:%M:%S")
    return f"{when}  {event.get('job_id') or '(node)'}  {event['kind']}  {_what(event)}"


def _what(event: dict[str, Any]) -> str:
    data = event.get("data") or {}
    kind = event["kind"]
    if kind == "state":
        said = f"{data.get('from', '')} -> {data.get('to', '')}"
        return f"{said}: {data['why']}" if data.get("why") else said
    if kind in ("plan", "replan"):
        allocations = data.get("allocations", {})
        workers = {job: given.get("workers_per_gpu") for job, given in allocations.items()}
        return f"generation {data.get('gen')}: workers per GPU {workers}"
    said = ", ".join(f"{key} {_figure(value)}" for key, value in data.items() if key != "why")
    why = data.get("why")
    return f"{said}: {why}" if why else said


def _figure(value: object) -> str:
    """A number as people read it (a gap of 0.28 s, not 0.2792165279388428)."""
    return f"{value:.3g}" if isinstance(value, float) else str(value)
