"""`stoker demo`: the whole system on this machine in about a minute.

It makes a small JPEG dataset, starts `stoker serve` with real PyTorch application masters
(CPU training slots in place of GPUs), submits `configs/workloads/demo-cpu.toml` on its
schedule, prints the dashboard's link and every launch, pause and resume as it happens,
and ends with a summary:
each job's throughput, its reallocations and pause gaps, and how far the measured
throughput was from the TPM's prediction. Ctrl-C (or SIGTERM) stops it; either way the
daemon and its agents are stopped and nothing is left running.
"""

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import tomli_w
import typer

from cli.common import fail, signed_percent
from cli.connection import Daemon
from cli.job_commands import dashboard_link
from cli.workload_commands import submit_on_schedule
from scheduler.config import DEFAULT_POLICY
from workloads.live import (
    DEMO_IMAGE_PX,
    FINAL,
    OwnImages,
    RunSpan,
    dataset_images,
    demo_settings,
    own_images,
)

if TYPE_CHECKING:  # imported when the demo runs: `stoker serve` loads none of it
    from workloads.spec import Workload

REPO_WORKLOAD = Path(__file__).resolve().parents[1] / "configs" / "workloads" / "demo-cpu.toml"


def demo_command(
    *,
    workload: Annotated[Path, typer.Option(help="the jobs to run")] = REPO_WORKLOAD,
    state_dir: Annotated[
        Path | None, typer.Option(help="keep the daemon's state here \\[a new temp dir]")
    ] = None,
    port: Annotated[int, typer.Option(help="the demo daemon's port")] = 8471,
    images: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="JPEGs in each dataset the demo makes \\[the workload's dataset_images, else 256]",
        ),
    ] = None,
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            help="run the workload twice, under balance and under the default policy, each "
            "on a fresh daemon, and compare their makespans with what the default predicted",
        ),
    ] = False,
) -> None:
    """Run a small dynamic workload of real training jobs through a live daemon."""
    from workloads.errors import WorkloadError  # noqa: PLC0415 (the CLI imports lazily)
    from workloads.spec import load_workload  # noqa: PLC0415

    # `kill` stops the demo as Ctrl-C does: the daemon and its agents with it. Python's own
    # SIGTERM ends the process at once, and the daemon it started trained on, orphaned.
    signal.signal(signal.SIGTERM, _interrupt)

    try:
        jobs = load_workload(workload)
    except WorkloadError as error:
        fail(str(error))
    where = state_dir or Path(tempfile.mkdtemp(prefix="stoker-demo-"))
    typer.echo(f"demo state, logs and checkpoints: {where}")
    count = dataset_images(jobs, images)
    dataset = _dataset(where / "data", count)
    own = {kind: _dataset(where / kind.folder, count, kind) for kind in own_images(jobs)}
    outcomes: dict[str, _Outcome] = {}
    for policy in ("balance", DEFAULT_POLICY) if compare else (DEFAULT_POLICY,):
        run = where / policy if compare else where  # each run its own daemon and state
        if compare:
            typer.echo(f"\n== the workload under {policy} ==")
        daemon = _start(run, jobs, dataset, port, policy)
        try:
            _wait_up(daemon, run, port, policy)
            token = (run / "state" / "admin.token").read_text().strip()
            outcomes[policy] = _run(Daemon(f"http://127.0.0.1:{port}", token, None), jobs, run, own)
        except KeyboardInterrupt:
            typer.echo("\ninterrupted: stopping the daemon and its agents", err=True)
            break
        finally:
            _stop(daemon)
            typer.echo(f"daemon stopped; its log is {run / 'daemon.log'}")
    if len(outcomes) == 2:
        _compare(outcomes)


_STOPS = (signal.SIGINT, signal.SIGTERM)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@dataclass(frozen=True)
class _Outcome:
    """One run of the workload, from its events: first submission to last end."""

    makespan_s: float
    samples: int
    predicted_gain: float | None  # the default's plans' gain over balance; None under balance


def _compare(outcomes: dict[str, _Outcome]) -> None:
    typer.echo("\nthe same workload, one run each")
    typer.echo(f"  {'policy':<12}{'makespan':>10}{'samples/s':>11}")
    for policy, outcome in outcomes.items():
        rate = outcome.samples / outcome.makespan_s
        typer.echo(f"  {policy:<12}{outcome.makespan_s:>8.1f} s{rate:>11.0f}")
    base, ours = outcomes["balance"], outcomes[DEFAULT_POLICY]
    told = ours.predicted_gain
    said = "no plan said" if told is None else f"its plans predicted {told:+.1%}"
    typer.echo(
        f"{DEFAULT_POLICY} against balance: {base.makespan_s / ours.makespan_s - 1:+.1%} in "
        f"makespan; {said}. One run each is this machine's noise as much as the policy's "
        "gain: bench/bench_live_gain.py runs more (docs/results.md)."
    )


def _stop(daemon: "subprocess.Popen[bytes]") -> None:
    """SIGTERM (it checkpoints and stops its agents), then a kill after 60 s. A second
    Ctrl-C or SIGTERM meanwhile would cut the wait short and leave the daemon running: both
    wait until it is done."""
    kept = {number: signal.signal(number, signal.SIG_IGN) for number in _STOPS}
    try:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
    finally:
        for number, handler in kept.items():
            signal.signal(number, handler)


def _dataset(root: Path, images: int, kind: OwnImages | None = None) -> Path:
    """`images` JPEGs in `root`: `kind`'s, else the run's shared dataset's."""
    from agents.datafiles import make_dataset  # noqa: PLC0415 (torch stays out of `stoker serve`)

    kind = kind or OwnImages(DEMO_IMAGE_PX)
    make_dataset(
        root,
        images=images,
        size=kind.side_px,
        classes=10,
        read_latency_s=kind.read_latency_s,
    )
    emulated = " (an emulated remote store)" if kind.read_latency_ms else ""
    typer.echo(f"made {images} JPEG images of {kind.describe()} in {root}{emulated}")
    return root


def _start(
    where: Path, jobs: "Workload", dataset: Path, port: int, policy: str
) -> "subprocess.Popen[bytes]":
    """`stoker serve` on the demo's node, planning with `policy` (bench/bench_live_gain.py
    runs the same), started (`_wait_up` waits for it to answer)."""
    settings = {
        "state_dir": str(where / "state"),
        "port": port,
        **demo_settings(jobs, dataset, policy),
    }
    where.mkdir(parents=True, exist_ok=True)
    config = where / "stoker.toml"
    config.write_text(tomli_w.dumps(settings))
    with (where / "daemon.log").open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "cli", "serve", "--config", str(config)],
            stdout=log,
            stderr=log,
            # Its config file alone: a STOKER_PORT or STOKER_AGENT_MODE of the user's shell
            # would win over the file and leave the demo talking to the wrong port.
            env={key: value for key, value in os.environ.items() if not key.startswith("STOKER_")},
            # Its own session: a Ctrl-C in the terminal reaches the demo alone, which stops
            # the daemon with one SIGTERM (a second SIGINT would make uvicorn quit at once,
            # without stopping its agents).
            start_new_session=True,
        )
    return process


def _wait_up(process: "subprocess.Popen[bytes]", where: Path, port: int, policy: str) -> None:
    """Until the daemon answers (at most 60 s), then where to see it."""
    import httpx  # noqa: PLC0415 (the CLI imports what a command needs, when it runs)

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            fail(f"the daemon did not start; see {where / 'daemon.log'}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                url = f"http://127.0.0.1:{port}"
                token = (where / "state" / "admin.token").read_text().strip()
                typer.echo(f"daemon up: {url}/docs (policy {policy})")
                typer.echo(f"dashboard: {dashboard_link(url, token)}")
                return
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()  # hung: not worth a graceful stop's minute
    fail(f"the daemon did not answer within 60 s; see {where / 'daemon.log'}")


def _run(
    daemon: Daemon, jobs: "Workload", where: Path, datasets: dict[OwnImages, Path]
) -> _Outcome:
    """Submit on schedule in a thread while this one tells what happens, as it happens;
    `datasets`: the jobs' own images."""
    ids: dict[str, str] = {}
    stopping = threading.Event()  # an interrupt: the daemon goes, the submitter says nothing

    def submit() -> None:
        try:
            ids.update(submit_on_schedule(daemon, jobs, 1.0, progress=False, datasets=datasets).ids)
        except Exception:
            if not stopping.is_set():
                raise

    submitter = threading.Thread(target=submit, daemon=True)
    submitter.start()
    seen, last_seq, names = _Seen(), 0, _Names()
    heard: list[dict[str, Any]] = []
    try:
        while True:
            for event in daemon.call("GET", "/v1/events", params={"after": last_seq}):
                last_seq = event["seq"]
                names.learn(event)
                _narrate(event, names)
                heard.append(event)
            for job in daemon.every_page("/v1/jobs"):
                seen.note(job)
            if not submitter.is_alive() and seen.ended(ids.values()):
                break
            time.sleep(0.5)
    except BaseException:
        stopping.set()
        raise
    for event in daemon.call("GET", "/v1/events", params={"after": last_seq}):
        _narrate(event, names)  # the last ends, if they came after the last look
        heard.append(event)
    _summary(daemon, ids, seen, where)
    return _outcome(heard, seen)


def _outcome(events: list[dict[str, Any]], seen: "_Seen") -> _Outcome:
    if not any(job["state"] == "completed" for job in seen.jobs.values()):
        fail("no job of the workload completed (the summary above says why): nothing to time")
    run = RunSpan.of(events)
    return _Outcome(
        makespan_s=run.makespan_s,
        samples=sum(job["iteration"] * job["batch_size"] for job in seen.jobs.values()),
        predicted_gain=run.planned_gain(),
    )


class _Names:
    """Job ids to the workload's names, and the clock of the first event."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.started: float | None = None

    def learn(self, event: dict[str, Any]) -> None:
        self.started = event["at"] if self.started is None else self.started
        if event["kind"] == "submitted" and event["job_id"]:
            self.names.setdefault(event["job_id"], event["job_id"].rsplit("-", 1)[0])

    def of(self, job_id: str | None) -> str:
        return self.names.get(job_id or "", job_id or "node")


def _narrate(event: dict[str, Any], names: _Names) -> None:
    name, data = names.of(event["job_id"]), event["data"]
    clock = f"{event['at'] - (names.started or event['at']):6.1f} s"
    if event["kind"] == "submitted" and "tenant" in data:
        typer.echo(f"{clock}  {name}: submitted")
    elif event["kind"] == "plan":
        shares = ", ".join(
            f"{names.of(job)} {plan['workers_per_gpu']}"
            for job, plan in data.get("allocations", {}).items()
        )
        typer.echo(f"{clock}  plan {data['gen']}, workers per GPU: {shares}")
    elif event["kind"] == "state" and data.get("to") in {
        "running",
        "pausing",
        "completed",
        "failed",
    }:
        why = f" ({data['why']})" if data.get("why") and data["to"] != "completed" else ""
        typer.echo(f"{clock}  {name}: {data['to']}{why}")
    elif event["kind"] == "resumed":
        typer.echo(
            f"{clock}  {name}: resumed with {data['workers']} workers per GPU, "
            f"{data['gap_s']:.2f} s after its pause"
        )


class _Seen:
    """What the demo saw of each job while it ran."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.errors: dict[str, list[float]] = {}

    def note(self, job: dict[str, Any]) -> None:
        self.jobs[job["id"]] = job
        predicted, measured = job["predicted_samples_per_s"], job["measured_samples_per_s"]
        if job["state"] == "running" and predicted and measured:
            self.errors.setdefault(job["id"], []).append(measured / predicted - 1.0)

    def ended(self, ids: Any) -> bool:
        return all(self.jobs.get(job_id, {}).get("state") in FINAL for job_id in ids)


def _summary(daemon: Daemon, ids: dict[str, str], seen: _Seen, where: Path) -> None:
    typer.echo("\nsummary")
    wide = max(len(name) for name in [*ids, "job"]) + 2
    typer.echo(
        f"  {'job':<{wide}}{'state':<11}{'samples/s':>10}{'pauses':>8}{'pause gap':>11}"
        f"{'measured vs predicted':>23}"
    )
    for name, job_id in ids.items():
        job = seen.jobs[job_id]
        events = daemon.call("GET", f"/v1/jobs/{job_id}/events")
        running = [e["at"] for e in events if e["kind"] == "state" and e["data"]["to"] == "running"]
        ended = [e["at"] for e in events if e["kind"] == "state" and e["data"]["to"] in FINAL]
        gaps = [e["data"]["gap_s"] for e in events if e["kind"] == "resumed"]
        pauses = sum(1 for e in events if e["kind"] == "state" and e["data"]["to"] == "pausing")
        samples = job["iteration"] * job["batch_size"]
        rate = samples / (ended[-1] - running[0]) if running and ended else 0.0
        gap = f"{statistics.median(gaps):.2f} s" if gaps else "-"
        errors = seen.errors.get(job_id)
        error = signed_percent(statistics.median(errors)) if errors else "-"
        typer.echo(
            f"  {name:<{wide}}{job['state']:<11}{rate:>10.0f}{pauses:>8}{gap:>11}{error:>23}"
        )
    typer.echo(
        "\nmeasured vs predicted: the median, while it ran, of the job's measured rate against "
        "the\n  prediction for its allocation, which starts at the built-in model (fitted for "
        "the paper's\n  GPU testbed) and learns the job from its heartbeats (docs/daemon.md, "
        '"The throughput model").'
    )
    typer.echo(
        f"\nwhere to look: {where / 'state' / 'jobs'} (each job's log, checkpoint, audit), "
        f"{where / 'daemon.log'}, and the events: stoker jobs --url {daemon.url} "
        f"--state-dir {where / 'state'} while a daemon runs"
    )
