"""The CLI's job commands on a running daemon: `stoker submit`, `stoker jobs`,
`stoker cancel`, `stoker resume` and `stoker dashboard`, registered here with `stoker logs`
(cli/job_logs.py) in the order `stoker --help` lists them. `stoker show` and
`stoker metrics` are in cli/job_view.py; how a command reaches the daemon is in
cli/connection.py.
"""

import json
import math
import tomllib
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

import typer

from cli.common import fail, print_json, read_text, signed_percent, span, table
from cli.connection import Daemon, StateDir, Token, Url
from cli.job_logs import follow_job, logs
from cli.job_state import FINAL_STATES

JsonOut = typer.Option("--json", help="the whole job, as JSON")
Follow = typer.Option(
    "--follow", "-f", help="then print its logs until it ends; exit 1 unless it completed"
)


def register_job_commands(app: typer.Typer) -> None:
    # `stoker submit -- python train.py --lr 0.1`: the command's own options pass through,
    # as after the command's first word even without `--`; a misspelt option of ours is
    # refused rather than run as the command.
    app.command(
        "submit", context_settings={"allow_extra_args": True, "allow_interspersed_args": False}
    )(submit)
    app.command("jobs")(jobs)
    app.command("logs")(logs)
    app.command("cancel")(cancel)
    app.command("resume")(resume)
    app.command("dashboard")(dashboard)


def submit(
    args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="JOB.toml|JOB.json | -- COMMAND...",
            help="a job file, or a command; stoker's options go before it (every option from"
            " the command's first word on is the command's own)",
        ),
    ] = None,
    *,
    name: Annotated[str | None, typer.Option(help="the job's name \\[the script's]")] = None,
    gpus: Annotated[int | None, typer.Option(min=1, help="GPUs, one rank each [1]")] = None,
    batch_size: Annotated[
        int | None,
        typer.Option(min=1, help="global batch, for the planner \\[the daemon's: 64]"),
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option(
            metavar="K=V", help="a variable for the job (it gets none of this shell's); repeat"
        ),
    ] = None,
    continue_from: Annotated[
        str | None,
        typer.Option(
            metavar="ID",
            help="start from this ended job's newest checkpoint, not from scratch (`stoker"
            " resume ID` runs it again with its own settings)",
        ),
    ] = None,
    time_limit: Annotated[
        float | None,
        typer.Option(
            min=1.0,
            metavar="SECONDS",
            help="the longest it may run: then it checkpoints and ends (`stoker resume` goes on)",
        ),
    ] = None,
    follow: Annotated[bool, Follow] = False,
    json_output: Annotated[bool, JsonOut] = False,
    url: Url = None,
    token: Token = None,
    state_dir: StateDir = None,
) -> None:
    """Submit a job and print its id (--json: the whole job; --follow: its id, then its logs
    until it ends): a TOML (or JSON) file of its fields, or a command to run from this
    directory (`stoker submit --gpus 2 -- python train.py --lr 0.1`)."""
    given = list(args or [])
    if not given:
        fail("give a job file (JOB.toml or JOB.json) or a command after --")
    if given[0].endswith((".toml", ".json")):
        for_a_command = {"--name": name, "--gpus": gpus, "--batch-size": batch_size, "--env": env}
        if told := [flag for flag, value in for_a_command.items() if value is not None]:
            fail(f"{', '.join(told)}: for a command; a job file sets its own, in {given[0]}")
        body = _job_file(given)
    else:
        body = {
            "name": name or _name_of(given),
            "command": given,
            "workdir": str(Path.cwd()),
            "env": _variables(env or []),
        }
        for field, value in (("gpus", gpus), ("batch_size", batch_size)):
            if value is not None:  # else the daemon's default
                body[field] = value
    if continue_from is not None:
        body["continue_from"] = continue_from
    if time_limit is not None:
        body["time_limit_s"] = time_limit
    daemon = Daemon(url, token, state_dir)
    _submitted(daemon, daemon.call("POST", "/v1/jobs", body), follow, json_output)


def resume(
    job_id: Annotated[str, typer.Argument(metavar="ID")],
    *,
    follow: Annotated[bool, Follow] = False,
    json_output: Annotated[bool, JsonOut] = False,
    again: Annotated[
        bool,
        typer.Option(
            "--again", help="though a job went on from it already: a second from its checkpoint"
        ),
    ] = False,
    url: Url = None,
    token: Token = None,
    state_dir: StateDir = None,
) -> None:
    """Submit an ended job (cancelled, failed or completed) again from its newest
    checkpoint: a new job of the same settings that goes on where it stopped (its model,
    optimizer, epoch and data position). Prints its id (--json: the whole job; --follow: its
    id, then its logs until it ends). A job resumed already is refused, pointing to the job
    that went on from it, unless --again. To change a setting on the way (more epochs,
    say), submit the job anew with `--continue-from ID`."""
    daemon = Daemon(url, token, state_dir)
    query = "?again=true" if again else ""
    job = daemon.call("POST", f"/v1/jobs/{job_id}/resume{query}")
    if follow:
        typer.echo(f"{job['id']} goes on from {job_id}'s newest checkpoint", err=True)
    _submitted(daemon, job, follow, json_output)


def _submitted(daemon: Daemon, job: dict[str, Any], follow: bool, whole: bool) -> None:
    """Print a job just submitted: its id (`whole`: all of it, as JSON), as sbatch prints
    its job's number; or, `follow`, its id and its logs until it ends."""
    if whole:
        print_json(job)
        return
    if not follow:
        typer.echo(job["id"])
        return
    typer.echo(f"submitted {job['id']}", err=True)
    if job["state"] == "submitted" and job.get("reason"):  # the window it waits for, say
        typer.echo(f"  {job['reason']}", err=True)
    follow_job(daemon, job["id"])


def _job_file(given: list[str]) -> dict[str, Any]:
    """The job `given[0]` describes, its relative paths made its folder's."""
    if len(given) > 1:  # read as a command's arguments
        fail(
            f"{' '.join(given[1:])}: after the job file; stoker's options go before it, as "
            f"sbatch's do (`stoker submit [OPTIONS] {given[0]}`)"
        )
    text = read_text(Path(given[0]), "job")
    try:
        # JSON as the REST API takes it (`POST /v1/jobs`), else TOML
        body = json.loads(text) if given[0].endswith(".json") else tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        fail(f"{given[0]}: not valid TOML: {error}")
    except json.JSONDecodeError as error:
        fail(f"{given[0]}: not valid JSON: {error}")
    if not isinstance(body, dict):
        fail(f"{given[0]}: a job file holds one object of the job's fields")
    where = _not_a_number(body)
    if where is not None:  # TOML's nan and inf: JSON, which the daemon reads, has neither
        fail(f"{given[0]}: {where}: not a finite number; give one")
    here = Path(given[0]).resolve().parent
    if "name" not in body:  # as for a command line: its script's name, else the file's
        command = body.get("command")
        words = command if isinstance(command, list) else []
        argv = [word for word in words if isinstance(word, str)]
        body["name"] = _name_of(argv if argv and len(argv) == len(words) else [given[0]])
    if "command" in body and "workdir" not in body:
        body["workdir"] = str(here)
    for key in ("workdir", "dataset"):
        if isinstance(body.get(key), str) and not Path(body[key]).is_absolute():
            body[key] = str(here / body[key])
    return body


def _name_of(command: list[str]) -> str:
    """A job name from its command: the script's name (`train.py` -> `train`)."""
    script = next((arg for arg in command[1:] if arg.endswith(".py")), command[0])
    stem = Path(script).stem
    cleaned = "".join(c if c.isalnum() or c in "._-" else "-" for c in stem).lstrip(".-_")
    return (cleaned or "job")[:40]


def _variables(pairs: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            fail(f"--env {pair!r}: write it as NAME=value")
        found[key] = value
    return found


def jobs(
    *,
    url: Url = None,
    token: Token = None,
    state_dir: StateDir = None,
    json_output: Annotated[bool, typer.Option("--json", help="as JSON")] = False,
    states: Annotated[
        list[str] | None,
        typer.Option(
            "--state",
            "-t",
            metavar="STATE",
            help="only jobs in this state (running, submitted, completed, failed, ...); repeat"
            " it, or give several with commas",
        ),
    ] = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", "-u", help="only this tenant's jobs (the admin's)")
    ] = None,
    name: Annotated[str | None, typer.Option("--name", "-n", help="only jobs of this name")] = None,
) -> None:
    """List the jobs the token may see, oldest first: id, state, model (or the command's
    script), GPUs, loader workers per GPU, iterations done (of how many), and for a running
    job the time it has `left` at its last minute's pace, the samples/s of its newest
    heartbeat and how far that is from what the plan predicted (`vs_plan`). A job that
    ended while its processes run on (a script saving after training, holding its GPUs)
    reads `completed (exiting)`."""
    query: dict[str, Any] = {"tenant": tenant, "name": name}
    query["state"] = [part.strip() for given in states or [] for part in given.split(",")]
    query = {key: value for key, value in query.items() if value}
    found = Daemon(url, token, state_dir).every_page("/v1/jobs", query)
    if json_output:
        print_json(found)
        return
    rows = [("id", "state", "what", "gpus", "workers", "progress", "left", "samples/s", "vs_plan")]
    for job in found:
        workers = job["workers_per_gpu"]
        if workers is None or job["state"] in FINAL_STATES:  # a restarted daemon no longer knows
            workers = "-"
        state = job["state"] + (" (exiting)" if job.get("exiting") else "")
        if job.get("failed_after_end") and job.get("exit_code"):
            state += f" (exit {job['exit_code']})"  # its script failed after its final step
        length = job["iterations"]
        progress = f"{job['iteration']}/{length}" if length is not None else str(job["iteration"])
        if job.get("unmanaged") and not job["iteration"]:  # no SDK: nothing says how far
            progress = "-"
        what = job["model"] or _name_of(job["command"] or ["command"])
        left = job.get("seconds_left")  # absent from an older daemon's reply
        rate, error = job["measured_samples_per_s"], job["prediction_error"]
        if job["state"] != "running":  # a heartbeat of its start or its end says little
            rate = error = None
        rows.append(
            (
                job["id"],
                state,
                what,
                str(job["gpus"]),
                str(workers),
                progress,
                "-" if left is None else span(left),
                "-" if rate is None else f"{rate:,.0f}",
                "-" if error is None else signed_percent(error),
            )
        )
    typer.echo(table(rows, right=6), nl=False)


def cancel(
    job_id: Annotated[str, typer.Argument(metavar="ID")],
    url: Url = None,
    token: Token = None,
    state_dir: StateDir = None,
) -> None:
    """Cancel a job; prints it as JSON. A job that ended while its processes run on (its
    script saving after its final step) has them stopped."""
    daemon = Daemon(url, token, state_dir)
    before = daemon.call("GET", f"/v1/jobs/{job_id}")
    job = daemon.call("DELETE", f"/v1/jobs/{job_id}")
    if before.get("exiting"):
        said = f"{job_id} had {job['state']}; its processes, running on after it, were stopped"
        typer.echo(said, err=True)
    elif job["state"] in ("completed", "failed"):
        typer.echo(f"{job_id} had already {job['state']}: nothing to cancel", err=True)
    print_json(job)


def dashboard(
    *,
    url: Url = None,
    token: Token = None,
    state_dir: StateDir = None,
) -> None:
    """Print the dashboard's link. It carries your token: the page trades it for a cookie,
    so keep the link to yourself."""
    daemon = Daemon(url, token, state_dir)
    daemon.call("GET", "/v1/node")  # a daemon is there, and the token is good
    typer.echo(dashboard_link(daemon.url, daemon.token))


def dashboard_link(url: str, token: str) -> str:
    """`url`'s dashboard, with `token` for the page to exchange."""
    return f"{url.rstrip('/')}/?{urlencode({'token': token})}"


def _not_a_number(value: object, where: str = "") -> str | None:
    """The path of the first nan or inf in a job file's fields (`curve.samples_per_s[1]`)."""
    if isinstance(value, float) and not math.isfinite(value):
        return where
    items: list[tuple[str, object]] = []
    if isinstance(value, dict):
        items = [(f"{where}.{key}" if where else str(key), inner) for key, inner in value.items()]
    elif isinstance(value, list):
        items = [(f"{where}[{index}]", inner) for index, inner in enumerate(value)]
    for path, inner in items:
        found = _not_a_number(inner, path)
        if found is not None:
            return found
    return None
