"""`stoker show ID` and `stoker metrics ID`: one job as the daemon knows it (Slurm's
`scontrol show job`), and the series its script reported with `job.report`."""

import math
import shlex
import time
from datetime import datetime
from typing import Annotated, Any

import typer

from cli.common import print_json, signed_percent, span, table
from cli.connection import Daemon, StateDir, Token, Url
from cli.job_state import FINAL_STATES, after_end

JobId = Annotated[str, typer.Argument(metavar="ID")]


def register_job_view(app: typer.Typer) -> None:
    app.command("show")(show)
    app.command("metrics")(metrics)


def show(
    job_id: JobId,
    url: Url = None,
    token: Token = None,
    state_dir: StateDir = None,
    json_output: Annotated[bool, typer.Option("--json", help="as JSON")] = False,
) -> None:
    """One job: its state and why, what it runs, its GPUs and loader workers, its progress,
    its samples/s against what the plan predicted, and the newest values its script
    reported."""
    daemon = Daemon(url, token, state_dir)
    job = daemon.call("GET", f"/v1/jobs/{job_id}")
    reported = daemon.call("GET", f"/v1/jobs/{job_id}/metrics", params={"points": 1})["newest"]
    if json_output:
        print_json({**job, "reported": reported})
        return
    # On a node without GPUs, jobs train on CPU slots: name them so, not "GPU 0".
    slot = "GPU" if daemon.call("GET", "/v1/node")["gpus"] else "CPU slot"
    described = _described(job, reported, time.time(), slot)
    rows = [(name, value) for name, value in described if value]
    width = max(len(name) for name, _ in rows)
    indent = "\n" + " " * (width + 2)  # a failure's stderr lines, under its reason
    lines = [name.ljust(width) + "  " + value.replace("\n", indent) + "\n" for name, value in rows]
    typer.echo("".join(lines), nl=False)


def _described(
    job: dict[str, Any], reported: dict[str, Any], now: float, slot: str
) -> list[tuple[str, str]]:
    """The job's lines as (label, text); an empty text is a line with nothing to say.
    `slot`: what the node's GPUs are ("GPU", or "CPU slot" on a node without them)."""
    state = job["state"]
    running_on = ", its processes still running: its GPUs are kept until they exit"
    gpus = f"{job['gpus']}"
    if job["gpu_indices"]:
        gpus += f" ({slot} {', '.join(str(index) for index in job['gpu_indices'])})"
    progress = f"iteration {job['iteration']:,}"
    if job.get("unmanaged") and not job["iteration"]:
        progress = "not known: it runs without the SDK, which would report it"
    if job["iterations"]:
        done = min(1.0, job["iteration"] / job["iterations"])
        progress += f" of {job['iterations']:,} ({done:.0%})"
    if job.get("seconds_left") is not None:  # absent from an older daemon's reply
        progress += f", about {span(job['seconds_left'])} left"
    submitted = job["submitted_at"]
    return [
        ("id", f"{job['id']} ({job['name']}, tenant {job['tenant']})"),
        ("state", state + (running_on if job.get("exiting") else "") + after_end(job)),
        ("phase", _phase(job)),
        ("reason", job["reason"]),
        ("runs", _what(job)),
        ("env", ", ".join(job.get("env_names", []))),
        ("continues", _continues(job)),
        ("history", _history(job)),
        ("gpus", f"{gpus}, {_batch(job)}"),
        ("workers", "" if state in FINAL_STATES else _workers(job)),
        ("progress", progress),
        ("samples/s", _rates(job) if state == "running" else ""),
        ("restarts", str(job["restarts"]) if job["restarts"] else ""),
        ("submitted", f"{_when(submitted)} ({span(now - submitted)} ago)"),
        ("ran", _ran(job, now)),
        ("files", _files(job)),
        ("reported", ", ".join(f"{name} {_number(value)}" for name, value in reported.items())),
    ]


def _phase(job: dict[str, Any]) -> str:
    """What its script says it is doing (absent from an older daemon's reply), and whether
    it is stalled."""
    phase = job.get("phase") or ""
    if job.get("stalled"):
        return f"{phase or 'unknown'}: STALLED, no step and no new phase for its stall limit"
    return phase


def _ran(job: dict[str, Any], now: float) -> str:
    """When it first ran and ended, and for how long (its queue wait too)."""
    started, ended = job.get("started_at"), job.get("ended_at")  # absent from older daemons
    if started is None:
        return ""
    waited = span(started - job["submitted_at"])
    if ended is None:
        return f"from {_when(started)} ({span(now - started)} so far; it waited {waited})"
    return f"{_when(started)} to {_when(ended)} ({span(ended - started)}; it waited {waited})"


def _files(job: dict[str, Any]) -> str:
    """Where the job's files are: its script's saves in output/ (`job.output_dir`)."""
    folder = job.get("job_dir")  # absent from an older daemon's reply
    if not folder:
        return ""
    return f"{folder}/output (job.output_dir), checkpoints/ and its logs beside it"


def _what(job: dict[str, Any]) -> str:
    if job["command"]:
        where = job.get("workdir")  # absent from an older daemon's reply
        return shlex.join(job["command"]) + (f"  (in {where})" if where else "")
    return f"the built-in trainer on zoo model {job['model']}"


def _history(job: dict[str, Any]) -> str:
    """Its lineage as one line (absent from an older daemon's reply), when it has one."""
    lineage = job.get("lineage") or []
    if len(lineage) < 2:
        return ""
    return " -> ".join(lineage[:-1]) + " -> this job (its metrics are one series across them)"


def _continues(job: dict[str, Any]) -> str:
    earlier = job.get("continue_from")
    return f"{earlier}, from that job's newest checkpoint" if earlier else ""


def _batch(job: dict[str, Any]) -> str:
    """The job's global batch: a command's as its script runs it, once its heartbeats said
    (its submit's figure is the planner's hint until then)."""
    said = job.get("script_batch_size")  # absent from an older daemon's reply
    if not job["command"]:
        return f"global batch {job['batch_size']}"
    if said is not None:
        return f"global batch {said}, as its script runs it"
    if job.get("unmanaged"):
        return f"global batch {job['batch_size']} as submitted (without the SDK it says none)"
    if job["state"] in FINAL_STATES:
        return f"global batch {job['batch_size']} as submitted (its script said none)"
    return f"global batch {job['batch_size']} assumed by the planner until its script says"


def _workers(job: dict[str, Any]) -> str:
    per_gpu = job["workers_per_gpu"]
    if job.get("unmanaged"):  # its DataLoaders' own counts, which stoker neither sets nor sees
        return "its script's own (it runs without the SDK: stoker cannot see or change them)"
    planned = job.get("planned_workers_per_gpu")  # absent from an older daemon's reply
    if per_gpu is None and planned is not None:
        return f"{_processes(planned)} per GPU planned, taken up when its agent says hello"
    if per_gpu is None:
        return "none yet (not planned)"
    if planned is not None:
        return f"{_processes(per_gpu)} per GPU, resizing to {planned}"
    return f"{_processes(per_gpu)} per GPU"


def _processes(count: int) -> str:
    return f"{count} loader process{'es' if count != 1 else ''}"


def _rates(job: dict[str, Any]) -> str:
    measured, predicted = job["measured_samples_per_s"], job["predicted_samples_per_s"]
    if job.get("unmanaged"):  # absent from an older daemon's reply
        return "not measured: it runs without the stoker SDK"
    if measured is None:
        return "no heartbeat yet"
    text = f"{measured:,.0f} measured"
    if predicted:
        text += f", {predicted:,.0f} predicted ({signed_percent(measured / predicted - 1)})"
    return text


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def metrics(
    job_id: JobId,
    *,
    points: Annotated[
        int, typer.Option(min=1, max=100_000, help="rows per metric, evenly spread, newest kept")
    ] = 20,
    url: Url = None,
    token: Token = None,
    state_dir: StateDir = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="as JSON: GET /v1/jobs/ID/metrics's reply")
    ] = False,
) -> None:
    """What a job's script reported with `job.report`: one column per metric, one row per
    step, thinned evenly to --points rows per metric (the first and the newest kept)."""
    daemon, path = Daemon(url, token, state_dir), f"/v1/jobs/{job_id}/metrics"
    found = daemon.call("GET", path, params={"points": points})
    while found.get("next"):  # a page holds 256 series: a job may report more
        more = daemon.call("GET", path, params={"points": points, "after": found["next"]})
        for part in ("series", "newest", "stride"):
            found[part] = {**found.get(part, {}), **more.get(part, {})}
        found["next"] = more.get("next")
    if json_output:
        print_json(found)
        return
    series: dict[str, list[list[Any]]] = found["series"]
    if not series:
        typer.echo(
            f"{job_id} has reported no metrics: a script reports them with the stoker SDK's"
            " `job.report(loss=loss)`"
        )
        return
    names = sorted(series)
    by_step: dict[int, dict[str, Any]] = {}
    for name in names:
        for step, value in series[name]:
            by_step.setdefault(step, {})[name] = value
    rows = [("step", *names)]
    for step in sorted(by_step):
        values = by_step[step]
        rows.append((str(step), *(_number(values[n]) if n in values else "-" for n in names)))
    typer.echo(table(rows, right=len(rows[0])), nl=False)


def _number(value: Any) -> str:
    """A reported value, short: 4 significant digits; null (a NaN or infinity) as nan."""
    if value is None:
        return "nan"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:.4g}"
    return str(value)
