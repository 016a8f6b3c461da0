"""Ordinary scripts survive under the daemon (issue 36): a long setup after `stoker.init()`
and a long evaluation at each epoch's end are phases, shown by `stoker show`, `stoker jobs`
filters and the dashboard, never taken for a hang; progress counts training steps only.
Real processes, real ZeroMQ, real training of a tiny model; the link's silence limit is
cut to 3 s so that the phases outlast it (the default is 60 s; docs/results.md has a run
of 60-s phases under it)."""

import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.bench_honest_ends import one_run
from tests.integration.cli import stoker
from tests.integration.daemon_harness import FAST, Daemon, daemon_factory, ended, job_body, wait_for

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    yield from daemon_factory(tmp_path)


def short_silence(serve: Callable[..., Daemon]) -> tuple[Daemon, tuple[str, ...]]:
    """A daemon that trains for real, with a 3-s silence limit; and the CLI's options for it.
    Its stop waits for no checkpoint: a script in its setup has none to give."""
    daemon = serve(
        agent_mode="process",
        scheduler={**FAST["scheduler"], "heartbeat_timeout_s": 3.0},  # type: ignore[dict-item]
        shutdown_grace_s=0.0,
    )
    return daemon, ("--url", daemon.url, "--state-dir", str(daemon.state_dir))


def slow_job(where: tuple[str, ...], name: str, *, setup_s: int, eval_s: int, epochs: int) -> str:
    """Submit scripts/slow_phases.py; its id."""
    submitted = stoker(
        "submit", *where, "--name", name, "--env", f"SETUP_S={setup_s}",
        "--env", f"EVAL_S={eval_s}", "--", sys.executable, str(SCRIPTS / "slow_phases.py"),
        str(epochs),
    )  # fmt: skip
    assert submitted.code == 0, submitted.stderr
    return submitted.stdout.strip()


def test_a_long_setup_and_a_long_evaluation_are_phases_not_hangs(
    serve: Callable[..., Daemon],
) -> None:
    daemon, where = short_silence(serve)
    job_id = slow_job(where, "slow", setup_s=4, eval_s=4, epochs=2)  # each past the 3-s limit
    phases: set[str] = set()
    with daemon.client() as client:

        def seen() -> bool:
            job = client.get(f"/v1/jobs/{job_id}").json()
            phases.add(job["phase"])
            return job["state"] in ("completed", "failed", "cancelled")

        wait_for("its end", seen, timeout_s=90.0)
        job = ended(client, job_id)
        assert job is not None
        assert job["state"] == "completed", job["reason"]
        assert job["restarts"] == 0
        assert job["iteration"] == 16, "2 epochs of 8 training steps; the evaluations' are none"
        assert {"setup", "training", "evaluation"} <= phases, phases
    shown = stoker("show", job_id, *where).stdout
    assert "done at step 16" in stoker("logs", job_id, *where).stdout
    assert re.search(r"^state\s+completed", shown, re.M), shown


def test_the_phase_is_shown_while_it_lasts_and_jobs_filter_like_squeue(
    serve: Callable[..., Daemon],
) -> None:
    daemon, where = short_silence(serve)
    job_id = slow_job(where, "setup", setup_s=60, eval_s=0, epochs=1)
    other = stoker("submit", *where, "--name", "other", "--", "sleep", "60").stdout.strip()
    with daemon.client() as client:
        wait_for(
            "its setup phase",
            lambda: client.get(f"/v1/jobs/{job_id}").json()["phase"] == "setup",
            timeout_s=30.0,
        )
        time.sleep(4.0)  # past the 3-s silence limit: its link still speaks
        shown = stoker("show", job_id, *where).stdout
        assert re.search(r"^phase\s+setup$", shown, re.M), shown
        assert re.search(r"^state\s+running", shown, re.M), shown
        board = client.get("/v1/dashboard").json()
        assert {job["id"]: job["phase"] for job in board["jobs"]}[job_id] == "setup"
    named = stoker("jobs", *where, "--name", "setup").stdout
    assert job_id in named and other not in named
    assert stoker("cancel", other, *where).code == 0
    wait_for(
        "the cancel",
        lambda: other in stoker("jobs", *where, "-t", "cancelled").stdout,
        timeout_s=30.0,
    )
    running = stoker("jobs", *where, "--state", "running,submitted").stdout
    assert job_id in running and other not in running
    assert stoker("jobs", *where, "-u", "nobody-here").stdout.count("\n") == 1, "a header only"
    events = stoker("events", other, *where).stdout
    assert re.search(r"state  \w+ -> cancelled: cancelled by admin", events), events
    everything = stoker("events", *where).stdout
    assert job_id in everything and other in everything


def test_a_job_submitted_to_an_idle_node_runs_within_two_seconds(
    serve: Callable[..., Daemon],
) -> None:
    # The paper's 30-s arrival window, as configured by default: it batches the decisions
    # that pause someone, and a job on an idle node pauses no one.
    daemon = serve(scheduler={**FAST["scheduler"], "arrival_window_s": 30.0})  # type: ignore[dict-item]
    with daemon.client() as client:
        submitted = time.monotonic()
        job_id = client.post("/v1/jobs", json=job_body("first")).json()["id"]
        wait_for(
            "it to run",
            lambda: client.get(f"/v1/jobs/{job_id}").json()["state"] == "running",
            timeout_s=10.0,
        )
        assert time.monotonic() - submitted < 2.0


def test_four_real_jobs_under_load_end_as_their_own_files_say(tmp_path: Path) -> None:
    # Four SDK jobs at once on two cores, two busy loops beside them, the default silence
    # limit: none is taken for lost, none relaunched, each ends as its markers say
    # (`python -m bench.bench_honest_ends` runs this ten times; docs/results.md). One epoch
    # of 64 steps: the busy loops burn both cores for as long as the jobs take, and every
    # hazard of the load (four starts at once, steps, the end against its marker) is in one.
    ends = one_run(tmp_path / "state", jobs=4, burners=2, epochs=1)
    assert all(job["honest"] for job in ends), ends
    assert [job["state"] for job in ends] == ["completed"] * 4, ends


def test_a_simulated_daemon_simulates_the_papers_node_not_this_hosts(
    serve: Callable[..., Daemon],
) -> None:
    daemon = serve(node={})  # simulated agents, no node in the config: the paper's testbed
    with daemon.client() as client:
        node = client.get("/v1/node").json()
        assert (node["gpus"], node["cpu_workers"]) == (4, 18), node
        ids = [client.post("/v1/jobs", json=job_body(f"j{n}")).json()["id"] for n in range(3)]
        wait_for(
            "three jobs side by side",
            lambda: [client.get(f"/v1/jobs/{i}").json()["state"] for i in ids] == ["running"] * 3,
        )


def test_a_job_past_its_time_limit_checkpoints_and_ends_with_that_reason(
    serve: Callable[..., Daemon],
) -> None:
    daemon = serve()
    with daemon.client() as client:
        body = job_body("limited", iterations=10**6, time_limit_s=2.0)
        job_id = client.post("/v1/jobs", json=body).json()["id"]
        wait_for("its end", lambda: ended(client, job_id) is not None, timeout_s=30.0)
        job = client.get(f"/v1/jobs/{job_id}").json()
        assert job["state"] == "cancelled", job
        assert job["reason"].startswith("time limit: it ran 2 s (time_limit_s)"), job["reason"]
        assert 0 < job["iteration"] < 10**6
