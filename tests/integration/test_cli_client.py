"""`stoker submit`, `jobs` and `cancel` against a live daemon."""

import json
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from agents.datafiles import make_dataset
from daemon.store import Store
from tests.integration.cli import STOKER, stoker
from tests.integration.daemon_harness import FAST, Daemon, daemon_factory, wait_for
from tests.integration.test_daemon import states

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    yield from daemon_factory(tmp_path)


def settled(client: httpx.Client, first_id: str, second_id: str) -> bool:
    """The second job launched (its arrival's round, which may pause the first to shrink
    it, is over) and the first running with heartbeats at its allocation."""
    first, second = (client.get(f"/v1/jobs/{job}").json() for job in (first_id, second_id))
    launched = second["state"] in ("starting", "running")
    return launched and first["state"] == "running" and first["prediction_error"] is not None


def test_submit_list_and_cancel_with_the_state_dirs_token(
    serve: Callable[..., Daemon], tmp_path: Path
) -> None:
    daemon = serve()
    job_file = tmp_path / "job.toml"
    job_file.write_text(
        'name = "cli-job"\nmodel = "mdResnet12"\nbatch_size = 64\ngpus = 1\niterations = 100000\n'
    )
    where = ("--url", daemon.url, "--state-dir", str(daemon.state_dir))
    submitted = stoker("submit", *where, job_file)  # the id alone, as sbatch prints its number
    assert submitted.code == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    assert re.fullmatch(r"cli-job-[0-9a-f]{12}", job_id), submitted.stdout
    long_name = "a-rather-long-experiment-name-lr0.1"
    command = stoker(
        "submit", "--json", "--name", long_name, *where, "--", "sleep", "60", cwd=tmp_path
    )
    assert command.code == 0, command.stderr
    with daemon.client() as client:
        second_id = str(command.json()["id"])
        wait_for("the round to settle", lambda: settled(client, job_id, second_id))
    listed = stoker("jobs", *where)
    assert job_id in listed.stdout and "mdResnet12" in listed.stdout
    assert f"{command.json()['id']}  " in listed.stdout and "  sleep  " in listed.stdout
    header, *lines = listed.stdout.splitlines()
    assert header.split() == [
        *("id", "state", "what", "gpus", "workers", "progress", "left", "samples/s", "vs_plan")
    ]
    assert len(lines) == 2 and {len(line) for line in lines} == {len(header)}, "columns align"
    rows = {line.split()[0]: line.split() for line in lines}
    assert rows[job_id][-1].endswith("%") and float(rows[job_id][-2].replace(",", "")) > 0
    assert rows[str(command.json()["id"])][-2:] == ["-", "-"], "no SDK: no heartbeats to show"
    shown = dict(line.split(None, 1) for line in stoker("show", job_id, *where).stdout.splitlines())
    assert shown["state"] == "running" and shown["runs"].endswith("zoo model mdResnet12")
    assert shown["gpus"].startswith("1 (CPU slot ") and shown["gpus"].endswith("global batch 64")
    assert shown["workers"].endswith("per GPU") and " of 100,000 (" in shown["progress"]
    folder = daemon.state_dir.resolve() / "jobs" / job_id
    assert shown["files"].startswith(f"{folder}/output (job.output_dir)"), shown
    measured, predicted = shown["samples/s"].split(", ")
    assert measured.endswith("measured") and predicted.endswith("%)"), shown
    cancelled = stoker("cancel", job_id, *where)
    assert cancelled.code == 0, cancelled.stderr
    with daemon.client() as client:
        wait_for("the cancel", lambda: states(client)["cli-job"] == "cancelled")
    shown = dict(line.split(None, 1) for line in stoker("show", job_id, *where).stdout.splitlines())
    assert shown["reason"] == "cancelled by admin", shown
    assert " to " in shown["ran"] and "; it waited " in shown["ran"], shown  # for accounting
    view = stoker("show", job_id, "--json", *where).json()
    assert view["submitted_at"] <= view["started_at"] < view["ended_at"], view  # type: ignore[operator]
    # The operator's backup of the state file, taken while the daemon runs, holds the jobs.
    out = tmp_path / "backup.db"
    copied = stoker("backup", out, "--state-dir", daemon.state_dir)
    assert copied.code == 0 and copied.json()["jobs"] == 2, copied.stderr
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    kept = Store(out)
    held = kept.job(job_id)
    kept.close()
    assert held is not None and held.state == "cancelled"
    again = stoker("backup", out, "--state-dir", daemon.state_dir)
    assert again.code == 2 and "exists; give a new file" in again.stderr


def test_errors_say_what_to_change(serve: Callable[..., Daemon], tmp_path: Path) -> None:
    daemon = serve()
    job_file = tmp_path / "job.toml"
    job_file.write_text('name = "x"\nmodel = "Resnet18"\nbatch_size = 64\ngpus = 1\n')
    token = daemon.tokens["admin"]
    missing = stoker("submit", "--url", daemon.url, "--token", token, job_file)
    assert missing.code == 2 and "iterations" in missing.stderr
    after = stoker("submit", job_file, "--url", daemon.url)
    assert after.code == 2 and "--url" in after.stderr and "go before it" in after.stderr
    ignored = stoker("submit", "--gpus", "2", job_file)  # the file's gpus would win, unsaid
    assert (
        ignored.code == 2
        and f"--gpus: for a command; a job file sets its own, in {job_file}" in ignored.stderr
    )
    none = stoker("submit", "--gpus", "0", "--url", "http://127.0.0.1:9", "--", "python", "x.py")
    assert none.code == 2 and "'--gpus': Input should be greater than or equal to 1" in (
        " ".join(none.stderr.split())  # rich wraps its box
    ), "refused before any daemon is asked"
    wrong = stoker("jobs", "--url", daemon.url, "--token", "nope")
    assert wrong.code == 2 and "401" in wrong.stderr
    made = stoker(
        "submit", "--json", "--url", daemon.url, "--token", token, "--", "sleep", "30"
    ).json()
    cut = stoker("cancel", str(made["id"])[:-6], "--url", daemon.url, "--token", token)
    assert cut.code == 2 and f"did you mean {made['id']}?" in cut.stderr, "an id copied short"
    nobody = stoker("jobs", "--url", "http://127.0.0.1:9", "--token", token)
    assert nobody.code == 2 and "stoker serve" in nobody.stderr
    no_token = stoker("jobs", "--url", daemon.url, cwd=tmp_path)
    assert no_token.code == 2 and "--token" in no_token.stderr
    assert f"no .stoker/admin.token in {tmp_path} or a folder above it" in no_token.stderr
    missing = stoker("jobs", "--url", daemon.url, "--state-dir", tmp_path / "elsewhere")
    assert missing.code == 2 and f"{tmp_path / 'elsewhere' / 'admin.token'}" in missing.stderr
    port = daemon.url.rsplit(":", 1)[1]
    second = stoker("serve", "--state-dir", tmp_path / "second", "--port", port)
    assert second.code == 2 and "is in use" in second.stderr and "--port" in second.stderr
    assert not (tmp_path / "second").exists(), "nothing made before the refusal"
    again = stoker("serve", "--state-dir", daemon.state_dir, "--port", port)
    assert again.code == 2 and "another stoker daemon (pid" in again.stderr, "named first"
    # A fresh state dir is made private from the start: nothing to tighten, nothing to warn.
    assert "open to others" not in daemon.log_path.read_text()


def test_the_token_is_found_from_a_subfolder_of_where_the_daemon_keeps_state(
    serve: Callable[..., Daemon], tmp_path: Path
) -> None:
    daemon = serve(state=".stoker")  # as `stoker serve` run in tmp_path keeps it
    deep = tmp_path / "project" / "scripts"
    deep.mkdir(parents=True)
    listed = stoker("jobs", "--url", daemon.url, cwd=deep)
    assert listed.code == 0, listed.stderr
    # Its port is not the default: the URL is read from the state dir, as the token is.
    assert daemon.url.rsplit(":", 1)[1] != "8470"
    found = stoker("jobs", cwd=deep)
    assert found.code == 0, found.stderr
    given = stoker("jobs", "--token", daemon.tokens["admin"], cwd=deep)
    assert given.code == 0, given.stderr
    (daemon.state_dir / "admin.token").write_text("not-the-token\n")
    wrong = stoker("jobs", "--url", daemon.url, cwd=deep)
    assert wrong.code == 2 and "401" in wrong.stderr
    assert f"token from {daemon.state_dir / 'admin.token'}" in wrong.stderr
    assert "takes one: --token or STOKER_TOKEN" in wrong.stderr
    # Stopped, it no longer says where it listens: the CLI says it is not running, rather
    # than send this state dir's token to whatever listens on the default port.
    daemon.stop()
    stopped = stoker("jobs", cwd=deep)
    assert stopped.code == 2, stopped.stderr
    assert f"the daemon of {daemon.state_dir} is not running" in stopped.stderr
    assert f"stoker serve --state-dir {daemon.state_dir}" in stopped.stderr
    daemon.start()
    daemon.kill(signal.SIGKILL)  # it leaves its daemon.url: stale, maybe another's port now
    assert (daemon.state_dir / "daemon.url").exists()
    killed = stoker("jobs", cwd=deep)
    assert killed.code == 2 and f"the daemon of {daemon.state_dir} is not running" in killed.stderr
    port = daemon.url.rsplit(":", 1)[1]  # started again where its jobs and users expect it
    assert f"stoker serve --state-dir {daemon.state_dir} --port {port}`" in killed.stderr
    elsewhere = stoker("jobs", "--url", "http://127.0.0.1:9", cwd=deep)
    assert elsewhere.code == 2 and "no daemon at http://127.0.0.1:9" in elsewhere.stderr


def test_a_job_files_relative_dataset_is_read_from_the_files_folder(
    serve: Callable[..., Daemon], tmp_path: Path
) -> None:
    # It checks the zoo trainer's dataset at submit; no job is launched (a trainer that
    # imports torch for nothing) within an arrival window of 5 minutes.
    waits = {"arrival_window_s": 300.0, "start_when_free": False}
    scheduler = {**FAST["scheduler"], **waits}  # type: ignore[dict-item]
    daemon = serve(agent_mode="process", scheduler=scheduler)
    project = tmp_path / "project"
    make_dataset(project / "data", images=8, size=32)
    (project / "job.toml").write_text(  # no name: the file's, as srun names a job
        'model = "smResnet20"\nbatch_size = 8\ngpus = 1\niterations = 1\ndataset = "data"\n'
    )
    where = ("--url", daemon.url, "--state-dir", str(daemon.state_dir))
    submitted = stoker("submit", "--json", *where, "project/job.toml", cwd=tmp_path)
    assert submitted.code == 0, submitted.stderr
    assert submitted.json()["name"] == "job"
    assert stoker("cancel", str(submitted.json()["id"]), *where).code == 0
    (project / "job.toml").write_text(
        (project / "job.toml").read_text().replace('"data"', '"no-data"')
    )
    refused = stoker("submit", *where, "project/job.toml", cwd=tmp_path)
    assert refused.code == 2 and f"{project / 'no-data'} holds no dataset" in refused.stderr
    # The same job as JSON, the body POST /v1/jobs takes, read the same way.
    fields = {"model": "smResnet20", "batch_size": 8, "gpus": 1, "iterations": 1, "dataset": "data"}
    (project / "as.json").write_text(json.dumps(fields))
    as_json = stoker("submit", "--json", *where, "project/as.json", cwd=tmp_path)
    assert as_json.code == 0 and as_json.json()["name"] == "as", as_json.stderr
    assert stoker("cancel", str(as_json.json()["id"]), *where).code == 0
    (project / "bad.json").write_text("{model: smResnet20}")
    bad = stoker("submit", *where, "project/bad.json", cwd=tmp_path)
    assert bad.code == 2 and "project/bad.json: not valid JSON: Expecting" in bad.stderr


def test_follow_exits_1_unless_the_job_completed(
    serve: Callable[..., Daemon], tmp_path: Path
) -> None:
    daemon = serve()
    where = ("--url", daemon.url, "--state-dir", str(daemon.state_dir))
    script = Path(__file__).parent / "scripts"
    done = stoker(  # a script without torch: only how it ends matters here
        "submit", "--follow", *where, "--", sys.executable, script / "plain.py", "0", "0",
        cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert done.code == 0 and done.stderr.rstrip().endswith(": completed"), done.stderr
    failed = stoker(
        "submit", "--follow", *where, "--", sys.executable, script / "fail_first.py",
        cwd=tmp_path, timeout=120,
    )  # fmt: skip
    job_id = failed.stderr.split()[1]  # `submitted ID`
    assert failed.code == 1 and failed.stderr.rstrip().endswith(f"\n{job_id}: failed")
    # The traceback was just copied from its stderr: the reason says so, not it again.
    assert failed.stderr.count("ValueError: shapes do not match") == 1, failed.stderr
    why = "\n  why: exited with code 1; its stderr ends as shown above\n"
    assert why + "  not relaunched: it failed before its first step\n" in failed.stderr
    again = stoker("logs", job_id, "-f", *where)
    assert again.code == 1 and again.stderr.rstrip().endswith(": failed")
    assert "\n  why: exited with code 1; its stderr ends as shown above\n" in again.stderr
    stdout_only = stoker("logs", job_id, "-f", "--stdout", *where)  # the traceback not shown
    assert stdout_only.stderr.startswith("  why: exited with code 1; stderr ends:\n  Traceback")
    assert "starting" in again.stdout and "ValueError" in again.stderr, (
        "both streams, each on its own"
    )
    # Read through a pipe its reader closes (`stoker logs ID | head -1`): quietly, no
    # traceback from the thread that copies it, with `cat`'s status.
    piped = subprocess.Popen(
        [STOKER, "logs", job_id, "--stdout", *where], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert piped.stdout is not None and piped.stderr is not None
    piped.stdout.close()  # gone before it writes a line
    with piped.stderr:
        complaint = piped.stderr.read()
    assert piped.wait(timeout=60) == 128 + signal.SIGPIPE and complaint == b"", complaint
    out_only = stoker("logs", job_id, "--stdout", *where)
    assert out_only.code == 0 and "starting" in out_only.stdout and out_only.stderr == ""
    err_only = stoker("logs", job_id, "--stderr", "--tail", "1", *where)
    notice, line = err_only.stderr.splitlines()  # the lines before the tail are said to be
    assert err_only.stdout == "" and line.startswith("[rank 0] ValueError"), err_only.stderr
    assert notice == "(its stderr: the last 1 lines; --tail N shows more)"
    whole = stoker("logs", job_id, "--stderr", *where)
    assert "--tail N" not in whole.stderr, "all of it shown: nothing to say"
    both = stoker("logs", job_id, "--stdout", "--stderr", *where)
    assert both.code == 2 and "give one of them, or neither" in both.stderr
    # A bug at step 5: run twice (the second from the top, no checkpoint), then failed.
    twice = stoker(
        "submit", "--follow", *where, "--", sys.executable, script / "count_train.py",
        "1", "0", "0", "96", "5", cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert twice.code == 1 and "it failed twice after completing step 4" in twice.stderr
    said = twice.stdout + twice.stderr
    assert said.count("----- stoker: started again") == 1, "in both logs, said once"
    # Its relaunch says why it trains from the top again.
    assert "stoker: restart 1: no checkpoint was written before the failure" in twice.stderr
    missing = stoker("logs", "nope", *where)
    assert missing.code == 2 and missing.stderr.count("error:") == 1, missing.stderr
    assert "404 no job 'nope'" in missing.stderr
