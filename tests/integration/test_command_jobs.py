"""Command jobs: a user's own script, submitted over REST to a live daemon and run with
the SDK. Real processes, real ZeroMQ, real training of a tiny model."""

import collections
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from daemon.host import slot_cpus
from tests.integration.cli import STOKER, stoker
from tests.integration.daemon_harness import (
    FAST,
    Daemon,
    daemon_factory,
    ended,
    free_port,
    job_body,
    stored_pid,
    wait_for,
)

SCRIPTS = Path(__file__).resolve().parent / "scripts"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    yield from daemon_factory(tmp_path)


@pytest.fixture(scope="module")
def plain_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One daemon with the default settings for the tests that submit to it and read what
    their own jobs did (each asks for its own job; none stops the daemon)."""
    factory = daemon_factory(tmp_path_factory.mktemp("plain"))
    yield next(factory)()
    next(factory, None)


ONE_SLOT = {"cpu_slots": 1, "cpu_workers": 2, "max_jobs_per_gpu": 1}  # one job at a time


def command_job(name: str, script: str, *args: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "command": [sys.executable, str(SCRIPTS / script), *args],
        "batch_size": 8,
        "gpus": 1,
        **fields,
    }


def running(client: httpx.Client, job_id: str) -> bool:
    return bool(client.get(f"/v1/jobs/{job_id}").json()["state"] == "running")


def failed_for(client: httpx.Client, job_id: str, timeout_s: float = 60) -> str:
    """Wait for the job to end; it must have failed, once: the reason its event gives."""
    done = wait_for("the job to end", lambda: ended(client, job_id), timeout_s=timeout_s)
    assert done["state"] == "failed", done
    events = client.get(f"/v1/jobs/{job_id}/events").json()
    (failure,) = [e for e in events if e["kind"] == "state" and e["data"]["to"] == "failed"]
    return str(failure["data"]["why"])


def test_a_daemon_with_the_default_state_dir_runs_a_job_from_another_folder(
    tmp_path: Path,
) -> None:
    """`stoker serve` with no --state-dir keeps its state in ./.stoker; a job whose workdir
    is elsewhere must still reach the daemon's socket (once a path relative to the daemon's
    folder, which the job read from its own: it ran, unheard, and `failed`). As after
    install, it has no training.default_dataset: a script runs to its end, its data once."""
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("STOKER_")}
    env |= {"STOKER_PORT": str(port), "STOKER_SCHEDULER__ARRIVAL_WINDOW_S": "0.3"}
    with (tmp_path / "daemon.log").open("wb") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "cli", "serve"], cwd=tmp_path, env=env, stdout=log,
            stderr=log,
        )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for("the daemon", lambda: _answers(url, daemon))
        state = tmp_path / ".stoker"
        token = (state / "admin.token").read_text().strip()
        bearer = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, headers=bearer, timeout=10) as client:
            zoo = client.post("/v1/jobs", json=job_body("zoo"))
            assert zoo.status_code == 422 and "dataset" in zoo.text, "the zoo trainer needs one"
            elsewhere = tmp_path / "project" / "scripts"
            elsewhere.mkdir(parents=True)
            run = stoker(
                "submit", "--follow", "--url", url, "--", sys.executable,
                SCRIPTS / "count_train.py", "2", "0", cwd=elsewhere, timeout=120,
            )  # fmt: skip
            assert run.code == 0, run.stderr + (tmp_path / "daemon.log").read_text()[-3000:]
            assert run.stderr.rstrip().endswith(": completed")
            done = client.get(f"/v1/jobs/{run.stderr.split()[1]}").json()
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    assert done["command"][1].endswith("count_train.py") and done["model"] is None
    assert done["state"] == "completed", done
    assert done["iteration"] == 24
    output = state / "jobs" / done["id"] / "output"
    seen = collections.Counter((output / "seen.txt").read_text().splitlines())
    assert len(seen) == 2 * 96 and set(seen.values()) == {1}
    assert list((output.parent / "checkpoints").glob("checkpoint-*.pt")), "a final checkpoint"


def _answers(url: str, daemon: "subprocess.Popen[bytes]") -> bool:
    assert daemon.poll() is None, "the daemon exited"
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.serial  # its learned rates are measured
def test_a_scripts_loader_workers_are_timed_and_its_curve_learned(
    serve: Callable[..., Daemon],
) -> None:
    # Its 2 workers take 20 ms a sample (a sleep), its step 60 ms a batch of 8: they deliver
    # 100 samples/s against its 133, so it waits for them, at 75 % of its step's rate. Sleeps
    # do not jitter: its knee is hard, T = min(G, L), and the learned curve predicts the
    # loaders' 100 samples/s. (One heartbeat holds a handful of batches: measured, it reads
    # 15 % either side.)
    daemon = serve(node=ONE_SLOT)
    with daemon.client() as client:
        body = command_job("timed", "count_train.py", "2", "0.06", "0.02", "480")
        reply = client.post("/v1/jobs", json=body)
        assert reply.status_code == 201, reply.text
        job_id = reply.json()["id"]

        def told() -> dict[str, Any] | None:
            shown: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
            return shown if shown["seconds_left"] is not None else None

        timed = wait_for("its time left", told)
        done = wait_for("the job to end", lambda: ended(client, job_id), 120)
        contention = client.get("/v1/node").json()["contention"]
    # Its script's 2 epochs of 60 batches, and the time left at 0.08 s or so a step.
    assert timed["iterations"] == 120 and timed["iteration"] < 120, timed
    steps_left = 120 - timed["iteration"]
    assert steps_left * 0.06 <= timed["seconds_left"] <= (steps_left + 5) * 0.2, timed
    assert done["state"] == "completed", done
    # One job at one load says nothing of the node's contention: the configured curve stands.
    assert contention["learned_from_jobs"] is False, contention
    assert contention["points"] and 0.0 < contention["efficiency_now"] <= 1.0, contention
    curve = done["curve"]
    assert 0.06 < curve["step_time_s"] < 0.08, curve  # the sleep, and a step of a tiny model
    assert 0.019 < curve["sample_cost_s"] < 0.03, curve  # the sleep, timed in the workers
    assert curve["knee_sharpness"] is not None and curve["knee_sharpness"] > 6, curve
    assert done["predicted_samples_per_s"] == pytest.approx(100.0, rel=0.1), done
    # Its CPU clocks (this node has no GPU): the sleeps take wall time and no CPU, so a
    # sample costs far less CPU than the 10 ms of wall time it takes. (What share of a core
    # its workers got, between sleeps, depends on what else this machine runs.)
    assert 0.0 < curve["cpu_cost_s"] < 0.005, curve
    assert 0.0 < curve["core_share"] <= 1.0, curve
    # Never paused, on a node where nothing paused: an in-place resize's default cost, and
    # the first batch a resize waits for, which one worker makes: 8 samples at 20 ms or so.
    assert 0.5 + 8 * 0.019 < done["pause_cost_s"] < 0.5 + 8 * 0.03, done


def test_a_script_that_counts_its_own_epochs_completes_at_its_exit_and_runs_once(
    serve: Callable[..., Daemon],
) -> None:
    daemon = serve(node=ONE_SLOT)
    body = command_job("own", "count_train.py", "2", "0", env={"OWN_LOOP": "1"})
    with daemon.client() as client:
        job_id = client.post("/v1/jobs", json=body).json()["id"]
        done = wait_for("the job to end", lambda: ended(client, job_id), timeout_s=60)
    assert done["state"] == "completed" and done["restarts"] == 0, done
    assert done["iteration"] == 24, "its last step, from its last word"
    assert "exited with code 0 outside `job.epochs(n)`" in done["reason"], done
    seen = daemon.state_dir / "jobs" / job_id / "output" / "seen.txt"
    assert len(seen.read_text().splitlines()) == 2 * 96, "trained once, not run again"


def test_a_script_that_raises_fails_at_once_with_its_exception(
    plain_daemon: Daemon,
) -> None:
    daemon = plain_daemon
    with daemon.client() as client:
        job = client.post("/v1/jobs", json=command_job("bug", "fail_first.py")).json()
        why = failed_for(client, job["id"])
    assert "exited with code 1" in why
    assert "ValueError: shapes do not match: (4, 1) against (4, 3)" in why


def test_a_script_whose_python_lacks_a_module_is_told_which_python_ran_it(
    serve: Callable[..., Daemon], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newcomer's first mistake: `stoker serve` started before the virtual environment was
    activated, so the job's `python`, found on the daemon's PATH, is another one, without
    torch. The reason says which interpreter ran and how to choose the right one."""
    other_env = tmp_path / "other-env" / "bin"
    other_env.mkdir(parents=True)
    python = other_env / "python"  # an interpreter without this environment's packages
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    monkeypatch.setenv("PATH", f"{other_env}{os.pathsep}{os.environ['PATH']}")
    daemon = serve()
    with daemon.client() as client:
        body = {"name": "mine", "command": ["python", str(script)], "batch_size": 8, "gpus": 1}
        job = client.post("/v1/jobs", json=body).json()
        why = failed_for(client, job["id"])
    assert "ModuleNotFoundError: No module named 'torch'" in why
    assert f"hint: 'torch' cannot be imported by {python}, the `python` on the job's PATH" in why
    assert "source .venv/bin/activate" in why and "full path" in why


def test_a_rank_other_than_0_that_fails_is_named_with_its_stderr(
    serve: Callable[..., Daemon],
) -> None:
    daemon = serve(node={"gpus": 2, "cpu_workers": 4})
    with daemon.client() as client:
        job = client.post("/v1/jobs", json=command_job("r", "fail_rank.py", gpus=2)).json()
        why = failed_for(client, job["id"])
    assert why.startswith("rank 1 exited with code 1; stderr ends:\nrank 1: out of memory"), why
    assert "rank 0" not in why, "rank 0 was stopped because of it, not blamed"


@pytest.fixture(scope="module")
def with_secrets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon whose own environment holds a secret and a tenant's token, configured the
    documented way (docs/daemon.md): issue 17, finding 1. Its jobs must see neither."""
    factory = daemon_factory(tmp_path_factory.mktemp("secrets"))
    with pytest.MonkeyPatch.context() as env:  # the daemon's environment, at its start
        env.setenv("DAEMON_ONLY_SECRET", "do-not-leak")
        env.setenv("STOKER_TOKENS__ALICE", "alice-token-must-stay-0123456789")
        daemon = next(factory)(tokens={"admin": "admin-token-must-stay-0123456789"})
    yield daemon
    next(factory, None)


def test_the_daemons_own_environment_stays_with_the_daemon(with_secrets: Daemon) -> None:
    daemon = with_secrets
    with daemon.client() as client:
        body = command_job("env", "show_env.py", env={"MY_SETTING": "7"})
        job = client.post("/v1/jobs", json=body).json()
        done = wait_for("the job to end", lambda: ended(client, job["id"]), timeout_s=60)
    assert done["state"] == "completed", done
    output = daemon.state_dir / "jobs" / job["id"] / "output"
    seen = (output / "env.json").read_text()
    in_worker = (output / "env_worker.json").read_text()  # a DataLoader worker's
    env = json.loads(seen)
    for text in (seen, in_worker):
        assert "do-not-leak" not in text and "must-stay" not in text
        assert "STOKER_TOKENS" not in text and "DAEMON_ONLY_SECRET" not in text
    assert env["MY_SETTING"] == "7" and env["STOKER_JOB_ID"] == job["id"]
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("0", "1", "0")
    assert {"MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "STOKER_CPU_SLOTS"} <= set(env)


def test_a_simulated_agent_gets_no_token_either(with_secrets: Daemon) -> None:
    daemon = with_secrets  # its agents are simulated (FAST's agent_mode)
    with daemon.client() as client:
        job = client.post("/v1/jobs", json=job_body("sim", iterations=100_000)).json()
        wait_for("the job to run", lambda: running(client, job["id"]), timeout_s=30)
        environ = Path(f"/proc/{daemon_pid_of(daemon, job['id'])}/environ").read_bytes()
        client.delete(f"/v1/jobs/{job['id']}")
    assert environ and b"must-stay" not in environ and b"STOKER_TOKENS" not in environ


def test_a_running_script_is_resized_live_when_a_second_job_arrives(
    serve: Callable[..., Daemon],
) -> None:
    daemon = serve(node={"cpu_slots": 2, "cpu_workers": 2})
    with daemon.client() as client:
        first = client.post("/v1/jobs", json=command_job("a", "count_train.py", "2", "0.1")).json()
        wait_for("a to run", lambda: running(client, first["id"]))
        alone = client.get(f"/v1/jobs/{first['id']}").json()["workers_per_gpu"]
        second = client.post("/v1/jobs", json=command_job("b", "count_train.py", "1", "0")).json()
        for job_id in (first["id"], second["id"]):
            done = wait_for("the jobs to end", partial(ended, client, job_id), timeout_s=120)
            assert done["state"] == "completed", done
        events = client.get(f"/v1/jobs/{first['id']}/events").json()
    resumed = [event["data"] for event in events if event["kind"] == "resumed"]
    assert resumed, ("a was paused and resumed in place when b arrived", alone, events)
    assert resumed[0]["workers"] < alone, (alone, resumed)
    moves = [e["data"]["to"] for e in events if e["kind"] == "state"]
    assert moves.count("starting") == 1, "a hot resize: the process stayed"
    seen = collections.Counter(
        (daemon.state_dir / "jobs" / first["id"] / "output" / "seen.txt").read_text().splitlines()
    )
    assert len(seen) == 2 * 96 and set(seen.values()) == {1}, "every sample once"


def test_a_jobs_logs_and_reported_metrics_are_served(serve: Callable[..., Daemon]) -> None:
    daemon = serve(log_level="info")  # as `stoker serve` logs by default
    where = ("--url", daemon.url, "--state-dir", str(daemon.state_dir))
    with daemon.client() as client:
        # It saves for 6 s after training: more than a failed job's processes are given.
        body = command_job("m", "count_train.py", "2", "0", env={"EVAL_S": "6"})
        job = client.post("/v1/jobs", json=body).json()
        done = wait_for("the job to end", lambda: ended(client, job["id"]), timeout_s=90)
        assert done["state"] == "completed", done
        # Reported after training: sent at once, while the script goes on saving.
        series = wait_for(
            "the evaluation after training", partial(final_loss_reported, client, job["id"])
        )
        assert client.get(f"/v1/jobs/{job['id']}").json()["exiting"], "it still saves"
        out = partial(client.get, f"/v1/jobs/{job['id']}/logs", params={"stream": "stdout"})
        wait_for("its work after training", lambda: "[rank 0] done: weight" in out().text)
        assert [step for step, _ in series["series"]["final_loss"]] == [24]
        assert series["newest"]["final_loss"] == series["series"]["final_loss"][0][1]
        losses = series["series"]["loss"]
        assert [step for step, _ in losses] == list(range(1, 25)), "one point per step"
        assert series["newest"]["loss"] == losses[-1][1] < losses[0][1]
        thin = client.get(f"/v1/jobs/{job['id']}/metrics", params={"points": 5}).json()
        assert len(thin["series"]["loss"]) <= 6 and thin["series"]["loss"][-1] == losses[-1]
        exited = lambda: not client.get(f"/v1/jobs/{job['id']}").json()["exiting"]  # noqa: E731
        wait_for("its processes to exit", exited)
        assert client.get("/v1/jobs/nope/logs").status_code == 404  # the admin's client
    with ThreadPoolExecutor(1) as beside:  # another job, followed, runs while this one is read
        following = beside.submit(
            stoker, "submit", *where, "--follow", "--env", "EVAL_S=3", "--",
            sys.executable, "count_train.py", "1", "0", cwd=SCRIPTS, timeout=120,
        )  # fmt: skip
        shown = stoker("show", job["id"], *where)
        assert shown.code == 0, shown.stderr
        lines = dict(line.split(None, 1) for line in shown.stdout.splitlines())
        assert lines["state"] == "completed" and lines["progress"] == "iteration 24 of 24 (100%)"
        assert lines["runs"].endswith("count_train.py 2 0") and "workers" not in lines
        assert lines["gpus"] == "1, global batch 8, as its script runs it"
        final = series["newest"]["final_loss"]
        assert lines["reported"] == f"final_loss {final:.4g}, loss {losses[-1][1]:.4g}"
        assert stoker("show", job["id"], "--json", *where).json()["reported"] == series["newest"]
        table = stoker("metrics", job["id"], "--points", "5", *where)
        assert table.code == 0, table.stderr
        header, *rows = [line.split() for line in table.stdout.splitlines()]
        assert header == ["step", "final_loss", "loss"]
        thinned = thin["series"]["loss"]
        assert [row[0] for row in rows] == [str(step) for step, _ in thinned], "loss's steps"
        assert rows[0][1] == "-" and rows[-1] == ["24", f"{final:.4g}", f"{losses[-1][1]:.4g}"]
        unknown = stoker("metrics", "nope", *where)
        assert unknown.code == 2 and "404 no job 'nope'" in unknown.stderr
        by_name = stoker("show", "m", *where)  # its name, not its id
        assert by_name.code == 2 and f"'m' is the name of {job['id']}" in by_name.stderr
        said = daemon.log_path.read_text()  # the operator's record of each job's moves
        assert (
            f"job {job['id']}: running" in said and f"job {job['id']}: completed (finished)" in said
        )
        # It saved for 6 s: the operator hears it kept its GPUs that long (longer under load).
        assert re.search(
            f"{job['id']}: its processes exited ([6-9]|[1-5][0-9]) s after its final step", said
        )
    # Followed, its output is shown until the script exits, not until its final step.
    followed = following.result()
    assert followed.code == 0 and "[rank 0] done: weight" in followed.stdout, followed.stdout
    late = stoker("cancel", job["id"], *where)
    assert late.code == 0 and f"{job['id']} had already completed: nothing to cancel" in late.stderr


def test_stoker_submit_runs_a_command_from_here_and_follows_it(
    serve: Callable[..., Daemon],
) -> None:
    daemon = serve()
    where = ("--url", daemon.url, "--state-dir", str(daemon.state_dir))
    run = stoker(
        "submit", *where, "--follow", "--env", "NOTE=hi", "--",
        sys.executable, "fail_first.py", cwd=SCRIPTS,
    )  # fmt: skip
    assert run.code == 1, "the job it followed failed"
    assert "[rank 0] starting; note: hi" in run.stdout, "its stdout on ours, with its env"
    assert "ValueError: shapes do not match" in run.stderr, "its stderr on ours"
    assert "ValueError" not in run.stdout
    assert run.stderr.strip().endswith(": failed")
    with daemon.client() as client:
        (job,) = client.get("/v1/jobs").json()
    assert job["name"] == "fail_first" and job["command"][1] == "fail_first.py"
    listed = stoker("jobs", *where)
    assert "fail_first" in listed.stdout and "failed" in listed.stdout
    shown = stoker("show", job["id"], *where).stdout.splitlines()
    said = dict(line.split(None, 1) for line in shown if line[:1].strip())
    assert said["runs"] == f"{sys.executable} fail_first.py  (in {SCRIPTS})"
    assert said["env"] == "NOTE", "what the submit gave it, its values kept to the job"
    reason = next(i for i, line in enumerate(shown) if line.startswith("reason"))
    stderr_lines = shown[reason + 1 : reason + 3]
    assert stderr_lines and all(line.startswith(" " * 8) for line in stderr_lines), shown
    assert any("ValueError: shapes do not match" in line for line in shown[reason:])
    empty = stoker("submit", *where)
    assert empty.code == 2 and "command after --" in empty.stderr
    # A misspelt option of stoker's is refused, not run as the command; after the command's
    # first word, every option is the command's (as srun and docker run have it).
    typo = stoker("submit", *where, "--folow", "--", sys.executable, "fail_first.py", cwd=SCRIPTS)
    assert typo.code == 2 and "No such option: --folow" in typo.stderr, typo.stderr
    theirs = stoker("submit", "--json", *where, "--name", "own-flags", sys.executable, "-c", "pass",
                    "--gpus", "2", cwd=SCRIPTS)  # fmt: skip
    assert theirs.code == 0, theirs.stderr
    sent = theirs.json()
    command = sent["command"]
    assert isinstance(command, list) and command[1:] == ["-c", "pass", "--gpus", "2"]
    assert sent["gpus"] == 1


def test_after_kill_9_a_script_resumes_from_its_newest_checkpoint(
    plain_daemon: Daemon,
) -> None:
    daemon = plain_daemon
    body = command_job("k", "count_train.py", "3", "0.1", checkpoint_every_s=0.5, max_restarts=2)
    with daemon.client() as client:
        job = client.post("/v1/jobs", json=body).json()
        checkpoints = daemon.state_dir / "jobs" / job["id"] / "checkpoints"
        wait_for("a periodic checkpoint", lambda: list(checkpoints.glob("checkpoint-*.pt")))
        wait_for("more steps", lambda: client.get(f"/v1/jobs/{job['id']}").json()["iteration"] > 12)
        killed_at = client.get(f"/v1/jobs/{job['id']}").json()["iteration"]
        exported = wait_for("the newest loss on /metrics", partial(reported_loss, client))
        assert f'job="{job["id"]}"' in exported and 'name="loss"' in exported
        pid = daemon_pid_of(daemon, job["id"])
        os.kill(pid, signal.SIGKILL)
        done = wait_for("the job to end", partial(ended, client, job["id"]), timeout_s=120)
        assert done["state"] == "completed", done
        assert done["restarts"] == 1
        losses = client.get(f"/v1/jobs/{job['id']}/metrics").json()["series"]["loss"]
    # The second run went on from its newest checkpoint and reported the steps after it
    # again: they replace the first run's, so the series is whole and has no repeat.
    assert [step for step, _ in losses] == list(range(1, 37)), "the loss series is whole"
    assert killed_at < 36
    hello_again = (daemon.state_dir / "jobs" / job["id"] / "stderr.log").read_text()
    assert "Traceback" not in hello_again


def test_a_script_that_fails_after_its_final_step_stays_completed_with_its_exit(
    plain_daemon: Daemon,
) -> None:
    # Its save fails after its final step: its training completed, its work did not (one
    # that exits cleanly then: tests/unit/daemon/test_command_lifecycle.py, test_the_next_...).
    daemon = plain_daemon
    where = ("--url", daemon.url, "--state-dir", str(daemon.state_dir))
    failed = stoker("submit", *where, "--follow", "--env", "SAVE_FAILS=1", "--",
                    sys.executable, "count_train.py", "1", "0", cwd=SCRIPTS)  # fmt: skip
    failed_id = failed.stderr.split()[1]
    assert failed.code == 1, failed.stderr
    assert failed.stderr.count("OSError: [Errno 28]") == 1, "the traceback, not again"
    assert failed.stderr.rstrip().endswith(
        f"{failed_id}: completed, then its script exited with code 1 after its final step"
    )
    assert re.search(
        r"\n  why: completed its final step; then, \d+ s after it, its script failed: exited"
        r" with code 1; its stderr ends as shown above\n",
        failed.stderr,
    ), failed.stderr
    seen = stoker("show", failed_id, "--json", *where).json()
    assert seen["state"] == "completed" and seen["exit_code"] == 1
    assert seen["failed_after_end"] is True
    assert "OSError: [Errno 28] No space left on device" in str(seen["reason"])
    listed = stoker("jobs", *where).stdout
    assert re.search(f"{failed_id} +completed \\(exit 1\\)", listed), listed


def seen(daemon: Daemon, job_id: str) -> list[str]:
    """The (epoch, sample) lines count_train.py wrote for the job, one per sample trained."""
    path = daemon.state_dir / "jobs" / job_id / "output" / "seen.txt"
    return path.read_text().splitlines() if path.exists() else []


def test_a_cancelled_script_goes_on_from_its_checkpoint_as_a_new_job(
    serve: Callable[..., Daemon],
) -> None:
    daemon = serve()
    where = ("--url", daemon.url, "--state-dir", str(daemon.state_dir))
    body = command_job("on", "count_train.py", "3", "0.1", checkpoint_every_s=3600.0)
    with daemon.client() as client:
        first = client.post("/v1/jobs", json=body).json()["id"]
        wait_for("steps", lambda: client.get(f"/v1/jobs/{first}").json()["iteration"] >= 5)
        refused = stoker("resume", first, *where)
        assert refused.code == 2 and "continue_from" in refused.stderr, refused.stderr
        assert f"job {first} is running; it can be continued once it has ended" in refused.stderr
        client.delete(f"/v1/jobs/{first}")
        stopped = wait_for("the cancel", partial(ended, client, first))
        assert stopped["state"] == "cancelled" and 5 <= stopped["iteration"] < 36
        gone = lambda: not client.get(f"/v1/jobs/{first}").json()["exiting"]  # noqa: E731
        wait_for("its processes to exit, its last checkpoint written", gone)
        stopped = client.get(f"/v1/jobs/{first}").json()  # at its checkpoint's step now
        resumed = stoker("resume", first, "--json", *where)
        assert resumed.code == 0, resumed.stderr
        second = str(resumed.json()["id"])
        assert resumed.json()["name"] == "on" and second != first
        assert resumed.json()["continue_from"] == first
        done = wait_for("the second job", partial(ended, client, second), timeout_s=120)
        losses = client.get(f"/v1/jobs/{second}/metrics").json()["series"]["loss"]
        own = client.get(f"/v1/jobs/{first}/metrics").json()["series"]["loss"]
    assert done["state"] == "completed" and done["iteration"] == 36, done
    said = (daemon.state_dir / "jobs" / second / "stderr.log").read_text()
    assert f"resuming from {daemon.state_dir / 'jobs' / first / 'checkpoints'}" in said, said
    # It went on from the cancel's checkpoint, where the cancelled job says it stopped: its
    # series goes on the first's, one point a step across both (the retrained steps once).
    assert [step for step, _ in losses] == list(range(1, 37)), (losses, stopped)
    assert losses[: stopped["iteration"]] == own[: stopped["iteration"]]
    # Every sample of every epoch once, over both jobs: none trained twice, none skipped.
    trained = seen(daemon, first) + seen(daemon, second)
    assert sorted(trained) == sorted(f"{epoch} {i}" for epoch in range(3) for i in range(96))
    # Resumed a second time, it is pointed to the job that went on from it.
    twice = stoker("resume", first, *where)
    assert twice.code == 2 and f"job {first} was resumed already, as {second}" in twice.stderr
    assert f"`stoker resume {second}` goes on from there" in twice.stderr, twice.stderr
    # A job with no checkpoint cannot go on: it is told why, and nothing is submitted.
    crashed = command_job("bug", "count_train.py", "3", "0", "0", "96", "1", max_restarts=0)
    with daemon.client() as client:
        crashed_id = client.post("/v1/jobs", json=crashed).json()["id"]
        assert failed_for(client, crashed_id).startswith("exited with code 1")
        answer = client.post(f"/v1/jobs/{crashed_id}/resume")
        assert answer.status_code == 422, answer.text
        assert f"job {crashed_id} left no checkpoint" in answer.text
        assert len(client.get("/v1/jobs").json()) == 3
        branch = client.post(f"/v1/jobs/{first}/resume", params={"again": True})  # on purpose
        assert branch.status_code == 201 and branch.json()["continue_from"] == first
        client.delete(f"/v1/jobs/{branch.json()['id']}")


def test_a_clean_stop_of_the_daemon_leaves_no_crash_in_a_scripts_log_nor_a_gap_in_its_metrics(
    serve: Callable[..., Daemon],
) -> None:
    # Stopped by a SIGTERM to its process group, a paused script's loader workers died
    # first, and PyTorch wrote "DataLoader worker ... is killed by signal" into its log.
    daemon = serve()
    with daemon.client() as client:
        job = client.post("/v1/jobs", json=command_job("long", "count_train.py", "50", "0.05"))
        job_id = job.json()["id"]
        wait_for("steps", lambda: client.get(f"/v1/jobs/{job_id}").json()["iteration"] > 5)
    daemon.kill(signal.SIGTERM)
    log = (daemon.state_dir / "jobs" / job_id / "stderr.log").read_text()
    assert "Traceback" not in log and "killed by signal" not in log, log
    # What it reported since its last flush went with its pause's checkpoint, on the way
    # out: the series the next daemon serves has every step, though none is trained again.
    again = serve(state=daemon.state_dir.name)
    with again.client() as client:
        losses = client.get(f"/v1/jobs/{job_id}/metrics").json()["series"]["loss"]
        client.delete(f"/v1/jobs/{job_id}")
    steps = [step for step, _ in losses]
    assert len(steps) > 5 and steps == list(range(1, len(steps) + 1)), steps


def test_a_dashboards_stream_and_a_log_follow_do_not_hold_a_stop_up(
    serve: Callable[..., Daemon],
) -> None:
    # uvicorn waits for open responses before it stops the app: 10 s, then cut with errors.
    daemon = serve(log_level="info")
    ended_streams: list[str] = []

    def read_to_the_end(path: str, params: dict[str, Any]) -> None:
        with daemon.client() as client, client.stream("GET", path, params=params) as reply:
            for _ in reply.iter_bytes():
                pass
        ended_streams.append(path)

    with daemon.client() as client:
        job = client.post("/v1/jobs", json=command_job("long", "count_train.py", "50", "0.05"))
        job_id = job.json()["id"]
        wait_for("steps", lambda: client.get(f"/v1/jobs/{job_id}").json()["iteration"] > 2)
    readers = [
        threading.Thread(target=read_to_the_end, args=("/v1/events/stream", {})),
        threading.Thread(target=read_to_the_end, args=(f"/v1/jobs/{job_id}/logs", {"follow": 1})),
    ]
    for reader in readers:
        reader.start()
    time.sleep(1.0)  # both open
    asked = time.monotonic()
    daemon.kill(signal.SIGTERM)
    took = time.monotonic() - asked
    for reader in readers:
        reader.join(timeout=5)
    assert len(ended_streams) == 2, ended_streams
    log = daemon.log_path.read_text()
    assert "graceful shutdown exceeded" not in log and "Exception in ASGI" not in log, log
    assert took < 8.0, f"stopped in {took:.1f} s: the streams held it up"


def final_loss_reported(client: httpx.Client, job_id: str) -> dict[str, Any] | None:
    """The job's metrics once they hold what it reported after its last epoch."""
    series: dict[str, Any] = client.get(f"/v1/jobs/{job_id}/metrics").json()
    return series if "final_loss" in series["series"] else None


def reported_loss(client: httpx.Client) -> str | None:
    """/metrics once it exports a reported value."""
    text = client.get("/metrics").text
    return text if "stoker_job_reported{" in text else None


def daemon_pid_of(daemon: Daemon, job_id: str) -> int:
    pid = stored_pid(daemon.state_dir, job_id)
    assert pid is not None, f"no agent recorded for {job_id}"
    return pid


def saving_then_next(client: httpx.Client, eval_s: int) -> tuple[str, str]:
    """Submit a job that saves for `eval_s` after its final step, then one that waits for
    its slot (on ONE_SLOT; a script without torch, as only its turn matters); their ids."""
    saving = command_job("saving", "count_train.py", "1", "0", env={"EVAL_S": str(eval_s)})
    first = client.post("/v1/jobs", json=saving).json()["id"]
    second = client.post("/v1/jobs", json=command_job("next", "plain.py", "0", "0"))
    return first, second.json()["id"]


def starts(client: httpx.Client, job_id: str) -> list[float]:
    """When each of the job's launches began (its moves to `starting`)."""
    return [
        event["at"]
        for event in client.get(f"/v1/jobs/{job_id}/events").json()
        if event["kind"] == "state" and event["data"]["to"] == "starting"
    ]


def test_cancelling_a_completed_job_whose_script_runs_on_stops_it_and_frees_its_slot(
    serve: Callable[..., Daemon],
) -> None:
    # Its script would save for a minute after its final step, holding the node's one slot.
    daemon = serve(node=ONE_SLOT)
    where = ("--url", daemon.url, "--state-dir", str(daemon.state_dir))
    with daemon.client() as client:
        first, second_id = saving_then_next(client, eval_s=60)
        done = wait_for("the first to complete", lambda: ended(client, first), timeout_s=60)
        assert done["exiting"] is True, done
        listed = stoker("jobs", *where).stdout.splitlines()
        assert any(line.startswith(first) and "completed (exiting)" in line for line in listed)
        board = client.get("/v1/dashboard").json()
        (shown,) = [job for job in board["jobs"] if job["id"] == first]
        assert shown["exiting"] is True and shown["gpu_indices"] == [0], shown
        assert board["node"]["jobs_running"] == 0, "one job ended, the other waits"
        # Its logs are followed until its processes end; Ctrl-C leaves it running, and says so.
        # As in a terminal: a suite run in the background (`make test &`) ignores SIGINT,
        # and a child started then would too, so Ctrl-C would never reach it.
        kept = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            follow = subprocess.Popen(
                [str(STOKER), "logs", first, "-f", "--stdout", *where],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=os.environ | {"PYTHONFAULTHANDLER": "1"},  # where it hangs, if it does
            )
        finally:
            signal.signal(signal.SIGINT, kept)
        assert follow.stdout is not None
        following, _, _ = select.select([follow.stdout], [], [], 30.0)
        assert following and "saving for 60 s" in follow.stdout.readline(), "it follows"
        follow.send_signal(signal.SIGINT)
        try:
            _, said = follow.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            follow.send_signal(signal.SIGABRT)  # its threads' stacks, on stderr
            _, stacks = follow.communicate(timeout=10)
            raise AssertionError(f"no exit 10 s after a Ctrl-C:\n{stacks}") from None
        assert follow.returncode == 130, said
        assert f"stopped following {first}, which runs on: `stoker logs {first} -f`" in said
        cancelled = stoker("cancel", first, *where)
        assert cancelled.code == 0, cancelled.stderr
        assert "had completed; its processes, running on after it, were stopped" in (
            cancelled.stderr
        )
        assert cancelled.json()["state"] == "completed"
        done = wait_for("the second to end", lambda: ended(client, second_id), timeout_s=60)
        assert done["state"] == "completed", done
        reported = client.get(f"/v1/jobs/{first}/metrics").json()["newest"]
    assert "final_loss" in reported, "what it reported before it was stopped is kept"
    again = stoker("cancel", first, *where)
    assert "had already completed: nothing to cancel" in again.stderr
    shown = stoker("show", first, *where).stdout
    assert "its processes, running on after its end, were stopped by admin" in shown, shown


def test_a_script_still_saving_when_the_daemon_restarts_is_watched_by_the_new_one(
    serve: Callable[..., Daemon],
) -> None:
    # It finished, then the daemon was killed while it went on saving: the new daemon
    # watches its process, which finished_exit_s bounds, and keeps its slot until then.
    daemon = serve(node=ONE_SLOT)
    body = command_job("saving", "count_train.py", "1", "0", env={"EVAL_S": "60"})
    with daemon.client() as client:
        job_id = client.post("/v1/jobs", json=body).json()["id"]
        marker = daemon.state_dir / "jobs" / job_id / "finished.json"
        wait_for("its final step", marker.exists, timeout_s=60)
        pid = daemon_pid_of(daemon, job_id)
        after = client.post("/v1/jobs", json=command_job("next", "plain.py", "0", "0"))
    daemon.kill(signal.SIGKILL)
    assert os.path.exists(f"/proc/{pid}"), "the script outlives the daemon"
    restarted = time.time()
    again = serve(state=daemon.state_dir.name, finished_exit_s=3.0, node=ONE_SLOT)
    next_id = after.json()["id"]
    with again.client() as client:
        assert client.get(f"/v1/jobs/{job_id}").json()["state"] == "completed"
        gone = lambda: not os.path.exists(f"/proc/{pid}")  # noqa: E731
        wait_for("the new daemon to stop it after finished_exit_s", gone, timeout_s=20)
        done = wait_for("the next to end", lambda: ended(client, next_id), timeout_s=90)
        assert done["state"] == "completed", done
        (started,) = starts(client, next_id)
    assert started >= restarted + 3.0, "the slot was kept until the script was stopped"


def test_a_command_without_the_sdk_outlives_a_daemon_stop_and_keeps_its_work(
    serve: Callable[..., Daemon],
) -> None:
    # It has no checkpoint: stopped and relaunched, it would start over. A clean stop
    # leaves it running, and the next daemon adopts it as it runs (a kill -9 too, and the
    # two in turn: tests/unit/daemon/test_command_lifecycle.py, on the service harness).
    scheduler = {**FAST["scheduler"], "unmanaged_after_s": 1.0}  # type: ignore[dict-item]
    daemon = serve(scheduler=scheduler, node=ONE_SLOT)
    with daemon.client() as client:
        body = command_job("plain", "plain.py", "10", "0", max_restarts=0)
        job_id = client.post("/v1/jobs", json=body).json()["id"]
        events = partial(client.get, f"/v1/jobs/{job_id}/events")
        wait_for("it to run unmanaged", lambda: '"unmanaged"' in events().text, timeout_s=30)
        pid = daemon_pid_of(daemon, job_id)
    daemon.kill(signal.SIGTERM)
    assert os.path.exists(f"/proc/{pid}"), "a clean stop leaves it running"
    again = serve(state=daemon.state_dir.name, scheduler=scheduler, node=ONE_SLOT)
    with again.client() as client:
        shown = client.get(f"/v1/jobs/{job_id}").json()
        assert (shown["state"], shown["restarts"], shown["unmanaged"]) == ("running", 0, True)
        assert "runs without the SDK and outlived the daemon" in shown["reason"], shown
        done = wait_for("it to end", lambda: ended(client, job_id), timeout_s=30)
    assert done["state"] == "completed" and done["restarts"] == 0, done
    assert "left no exit code this daemon could read" in done["reason"], done
    log = (daemon.state_dir / "jobs" / job_id / "stdout.log").read_text()
    assert "started again" not in log, "one run, never restarted"


def test_a_command_without_the_sdk_runs_unmanaged_and_ends_by_its_exit_code(
    serve: Callable[..., Daemon],
) -> None:
    # A real script's silence, output and exit. What the daemon decides for such commands
    # (never paused, `stoker show`'s words, an exit code's failure) is in
    # tests/unit/daemon/test_command_lifecycle.py, on the service harness.
    scheduler = {**FAST["scheduler"], "unmanaged_after_s": 1.0}  # type: ignore[dict-item]
    daemon = serve(scheduler=scheduler, node={"cpu_slots": 3, "cpu_workers": 3})
    with daemon.client() as client:
        plain = client.post("/v1/jobs", json=command_job("plain", "plain.py", "8", "0")).json()
        events = partial(client.get, f"/v1/jobs/{plain['id']}/events")
        wait_for("plain to run unmanaged", lambda: "unmanaged" in events().text, timeout_s=30)
        logs = partial(client.get, f"/v1/jobs/{plain['id']}/logs", params={"stream": "stdout"})
        wait_for("plain's output while it runs", lambda: "plain: running" in logs().text)
        assert ended(client, plain["id"]) is None, "printed, not flushed: out as it ran"
        assert client.get(f"/v1/jobs/{plain['id']}").json()["unmanaged"] is True
        done = wait_for("it to end", partial(ended, client, plain["id"]), timeout_s=120)
    assert done["state"] == "completed" and done["restarts"] == 0, done


def test_with_cpu_sets_jobs_side_by_side_split_the_cpus_and_one_alone_has_them_all(
    serve: Callable[..., Daemon],
) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    node = {"cpu_slots": 2, "cpu_workers": 2, "cpu_sets": True}
    daemon = serve(agent_mode="process", node=node)
    halves = [list(group) for group in slot_cpus(allowed, 2)]
    with daemon.client() as client:
        assert client.get("/v1/node").json()["host"]["cpu_sets"] == halves
        long = client.post("/v1/jobs", json=command_job("long", "show_cpus.py", "8", "0.25"))
        # its own PATH, without taskset's folder: taskset is started by the daemon's path
        short_job = command_job("short", "show_cpus.py", "2", "0.25", env={"PATH": "/none"})
        short = client.post("/v1/jobs", json=short_job)
        outs = {}
        for reply in (long, short):
            assert reply.status_code == 201, reply.text
            job_id: str = reply.json()["id"]
            done = wait_for("the job to end", partial(ended, client, job_id), 90)
            assert done["state"] == "completed", done
            logs = client.get(f"/v1/jobs/{job_id}/logs", params={"stream": "stdout"})
            outs[reply.json()["name"]] = logs.text
    # Side by side, each had its half, its loader worker too; alone at the end, all of them.
    for half in halves:
        assert f"loader cpus {half}" in outs["long"] + outs["short"], outs
    assert f"rank cpus {allowed}" in outs["long"], outs["long"]
    seen = {line.split("cpus ", 1)[1] for line in outs["short"].splitlines() if "cpus " in line}
    assert len(seen) == 1 and seen.pop() in map(str, halves), outs["short"]
