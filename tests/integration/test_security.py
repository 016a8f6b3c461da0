"""Issue 17's adversarial suite: each finding replayed against a live daemon on loopback,
bounded in time. docs/security.md states the threat model these tests hold it to."""

import concurrent.futures
import contextlib
import json
import os
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import zmq

from agents.protocol import FinishedMessage, HeartbeatMessage, encode
from daemon.agentlink import REFUSALS_SAID
from daemon.processes import alive
from daemon.store import JobRecord, Store
from tests.integration.cli import stoker
from tests.integration.daemon_harness import (
    Daemon,
    daemon_factory,
    ended,
    job_body,
    stored_pid,
    wait_for,
)

SCRIPTS = Path(__file__).parent / "scripts"

ADMIN = "admin-token-never-logged-0123456789"
ALICE = "alice-token-never-logged-0123456789"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    yield from daemon_factory(tmp_path)


@pytest.fixture(scope="module")  # one daemon with tenants for the tests that only ask it
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    factory = daemon_factory(tmp_path_factory.mktemp("guarded"))
    yield next(factory)(tokens={"admin": ADMIN, "alice": ALICE, "bob": BOB})
    next(factory, None)


def test_a_token_in_a_query_string_never_reaches_the_log(serve: Callable[..., Daemon]) -> None:
    """Finding 2: signing in with `/?token=` (and any `?token=`, even refused) wrote the
    token into the access log."""
    daemon = serve(tokens={"admin": ADMIN, "alice": ALICE}, log_level="info")  # the worst case
    with httpx.Client(base_url=daemon.url, timeout=10, follow_redirects=True) as browser:
        signed_in = browser.get("/", params={"token": ALICE})
        assert signed_in.status_code == 200 and browser.cookies, "signed in, by its cookie"
    with httpx.Client(base_url=daemon.url, timeout=10) as client:  # no cookie
        refused = client.get("/v1/jobs", params={"token": "WRONG-never-logged-either"})
        assert refused.status_code == 401
        client.get("/v1/jobs", params={"x": "1", "Token": ADMIN})
    text = wait_for("the access log's lines", lambda: _access_lines(daemon), timeout_s=10)
    assert "never-logged" not in text, text
    assert "token=[redacted]" in text and "Token=[redacted]" in text


def _access_lines(daemon: Daemon) -> str | None:
    text = daemon.log_path.read_text()
    return text if text.count("token=[redacted]") + text.count("Token=[redacted]") >= 3 else None


def _modes(root: Path) -> dict[str, int]:
    """Every path under `root` (itself as "."), by its relative name: its permission bits."""
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        if not path.is_symlink() and not path.is_socket():
            found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def test_the_state_dir_and_everything_a_job_leaves_are_their_owners_alone(
    serve: Callable[..., Daemon],
) -> None:
    """Finding 3: the state dir and job folders were 755, logs, checkpoints and audits 644,
    so any local user read any tenant's model and optimizer."""
    daemon = serve()
    with daemon.client() as client:
        body = {
            "name": "private",
            "command": [sys.executable, str(SCRIPTS / "show_env.py")],
            "batch_size": 2,
            "gpus": 1,
            "audit_samples": True,
        }
        job = client.post("/v1/jobs", json=body).json()
        done = wait_for("the job to end", lambda: ended(client, job["id"]), timeout_s=60)
    assert done["state"] == "completed", done
    modes = _modes(daemon.state_dir)
    job_dir = f"jobs/{job['id']}"
    written = {  # what the daemon and the job wrote, one of each kind
        "stoker.db", job_dir, f"{job_dir}/stderr.log", f"{job_dir}/output/env.json",
        f"{job_dir}/audit/rank0.txt",
    }  # fmt: skip
    assert written <= set(modes), sorted(modes)
    assert any(name.startswith(f"{job_dir}/checkpoints/checkpoint-") for name in modes)
    open_to_others = {name: oct(mode) for name, mode in modes.items() if mode & 0o077}
    assert open_to_others == {}, "group or others may read or enter these"


def test_an_older_state_dir_is_closed_at_start(
    serve: Callable[..., Daemon], tmp_path: Path
) -> None:
    state, loose = tmp_path / "state", tmp_path / "state" / "jobs" / "old-job"
    state.mkdir()
    Store(state / "stoker.db").close()
    loose.mkdir(parents=True)
    (loose / "checkpoint.pt").write_bytes(b"weights")
    for path, mode in ((state, 0o755), (loose, 0o755), (loose / "checkpoint.pt", 0o644)):
        os.chmod(path, mode)
    daemon = serve()
    modes = _modes(daemon.state_dir)
    closed = (modes["."], modes["jobs/old-job"], modes["jobs/old-job/checkpoint.pt"])
    assert closed == (0o700, 0o700, 0o600)
    assert "were open to others: now 0600/0700" in daemon.log_path.read_text()


def test_a_state_dir_deleted_under_the_daemon_is_said_and_nothing_more_is_accepted(
    serve: Callable[..., Daemon],
) -> None:
    """Finding 7: with its state dir deleted, the daemon kept answering 201, and the next
    start forgot every job it had acknowledged."""
    daemon = serve()
    with daemon.client() as client:
        assert client.post("/v1/jobs", json=job_body("kept")).status_code == 201
        shutil.rmtree(daemon.state_dir)
        refused = client.post("/v1/jobs", json=job_body("lost"))
        health = client.get("/healthz")
    assert refused.status_code == 503 and "was deleted or replaced" in refused.text
    assert health.status_code == 503 and health.json()["status"] == "state lost"
    assert "state lost: " in daemon.log_path.read_text()


def test_job_folders_without_their_database_refuse_to_start(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "jobs" / "resnet-0a1b2c").mkdir(parents=True)
    run = stoker("serve", "--state-dir", state, "--port", "1")
    assert run.code != 0 and "Traceback" not in run.stderr
    assert "stoker.db is missing but" in run.stderr and "holds 1 job folder" in run.stderr
    assert not (state / "stoker.db").exists(), "no empty database made in its place"


def test_a_start_that_would_run_a_tenants_job_as_root_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    # Restarted without the config that named alice (and mapped her to her unix user), a
    # root daemon launched her queued job as root. A token file others may read is said.
    state = tmp_path / "state"
    state.mkdir()
    store = Store(state / "stoker.db")
    spec = {"command": ["python", "train.py"], "batch_size": 8, "gpus": 1}
    store.add_job(JobRecord("queued", "alice", "queued", spec, "submitted", 1.0, 1.0, 0, "", None))
    store.close()
    config = tmp_path / "stoker.toml"
    config.write_text(f'[tokens]\nadmin = "{"a" * 24}"\n')
    config.chmod(0o644)
    run = stoker("serve", "--config", config, "--state-dir", state, "--port", "1")
    assert run.code == 2 and "Traceback" not in run.stderr, run.stderr
    assert f"{config} holds the tenants' tokens and other users may read it (mode 644)" in (
        run.stderr
    )
    assert f"error: {state} holds unfinished jobs of alice, whom this config gives no token" in (
        run.stderr
    )
    for bad in (["serve", "--log-level", "bogus"], ["simulate", "x.toml", "--seed", "-1"]):
        run = stoker(*bad)
        assert run.code == 2 and "Traceback" not in run.stderr, run.stderr
    afile = tmp_path / "afile"
    afile.write_text("")
    run = stoker("serve", "--state-dir", afile, "--port", "1")
    assert run.code == 2 and "Traceback" not in run.stderr, run.stderr
    assert f"error: state dir: {afile} cannot be used (File exists" in run.stderr


def test_a_corrupt_database_is_one_clear_error(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "stoker.db").write_bytes(b"this is not a database, it was overwritten" * 100)
    run = stoker("serve", "--state-dir", state, "--port", "1")
    assert run.code != 0 and "Traceback" not in run.stderr
    assert f"{state / 'stoker.db'}: cannot be used as stoker's state" in run.stderr
    assert "Restore it from a backup" in run.stderr and len(run.stderr.splitlines()) <= 3


def test_event_streams_are_capped_per_tenant_and_on_the_node(
    serve: Callable[..., Daemon],
) -> None:
    """Finding 9: 1,500 open event streams of one tenant pushed another's submit p99 to
    25 s. Past a tenant's cap, or the node's, a new stream is a 429; a closed one frees
    its place."""
    tokens = {"admin": ADMIN, "alice": ALICE, "bob": "bob-token-0123456789abcdef"}
    daemon = serve(tokens=tokens, max_streams_per_tenant=2, max_streams=3)
    with (
        contextlib.ExitStack() as held,
        daemon.client("alice") as alice,
        daemon.client("bob") as bob,
    ):
        first = held.enter_context(alice.stream("GET", "/v1/events/stream"))
        held.enter_context(alice.stream("GET", "/v1/events/stream"))
        assert first.status_code == 200
        refused = alice.get("/v1/events/stream")
        assert refused.status_code == 429 and "max_streams_per_tenant" in refused.text
        held.enter_context(bob.stream("GET", "/v1/events/stream"))
        node_full = bob.get("/v1/events/stream")
        assert node_full.status_code == 429 and "(max_streams)" in node_full.text
        assert bob.post("/v1/jobs", json=job_body("still-served")).status_code == 201
        first.close()  # the daemon sees the disconnect within a poll (0.25 s)
        wait_for("a closed stream's place to be free", lambda: _opens(alice), timeout_s=5)


def _opens(client: httpx.Client) -> bool:
    with client.stream("GET", "/v1/events/stream") as stream:
        return stream.status_code == 200


def test_a_flood_of_refused_agent_messages_writes_a_bounded_log(
    serve: Callable[..., Daemon],
) -> None:
    """Finding 10: one WARNING line per refused ZeroMQ message, so a flood wrote an
    unbounded log. Every refusal is still counted."""
    daemon = serve()
    context = zmq.Context()
    rogue = context.socket(zmq.DEALER)
    rogue.setsockopt(zmq.LINGER, 0)
    rogue.connect(f"ipc://{daemon.state_dir / 'agents.sock'}")
    try:
        for index in range(300):
            rogue.send(b"garbage %d" % index)
        with daemon.client() as client:
            wait_for(
                "every refusal counted",
                lambda: client.get("/v1/node").json()["agent_messages_refused"] == 300,
            )
    finally:
        rogue.close()
        context.term()
    said = daemon.log_path.read_text().count("message refused")
    assert 1 <= said <= REFUSALS_SAID, said


PUBLIC = {"/healthz", "/docs", "/openapi.json", "/"}  # docs/daemon.md, "REST"


def test_every_route_but_the_public_ones_needs_a_token(guarded: Daemon) -> None:
    """Finding 10: the docs said every route but /healthz needs a token, and /docs and
    /openapi.json answered without one. They stay open (they describe the API and hold no
    data; docs/security.md says so); every other route is checked here."""
    with httpx.Client(base_url=guarded.url, timeout=10) as anonymous:
        schema = anonymous.get("/openapi.json")
        assert schema.status_code == 200 and anonymous.get("/docs").status_code == 200
        paths = schema.json()["paths"]
        for path, operations in paths.items():
            concrete = path.replace("{job_id}", "some-job").replace("{name}", "stdout")
            for method in operations:
                if path in PUBLIC and method == "get":
                    continue
                answer = anonymous.request(method.upper(), concrete)
                assert answer.status_code == 401, (method, path, answer.status_code)
    assert {"/v1/jobs", "/v1/node", "/metrics"} <= set(paths), "the schema lists the API"


def test_the_schema_describes_the_422_bodies_the_api_sends(guarded: Daemon) -> None:
    with guarded.client() as client:
        schema = client.get("/openapi.json").json()["components"]["schemas"]
        refused = client.post("/v1/jobs", json={"name": "x", "gpus": 0, "batch_size": 1})
    assert set(schema["ValidationError"]["properties"]) == {"field", "message"}
    assert refused.status_code == 422
    assert all(set(problem) == {"field", "message"} for problem in refused.json()["detail"])


BOB = "bob-token-never-logged-0123456789"


def test_one_tenants_flood_is_capped_and_waits_its_turn(serve: Callable[..., Daemon]) -> None:
    """Finding 5: one tenant queued 1,500 jobs and every later job of another waited behind
    all of them; nothing limited a tenant's queue."""
    daemon = serve(
        tokens={"admin": ADMIN, "alice": ALICE, "bob": BOB},
        node={"cpu_slots": 1, "cpu_workers": 4, "max_jobs_per_gpu": 1},
        tenants={"alice": {"max_queued_jobs": 3}},
    )
    long = {"iterations": 1_000_000}
    with daemon.client("alice") as alice, daemon.client("bob") as bob:
        first = alice.post("/v1/jobs", json=job_body("a-first", **long)).json()
        wait_for("alice's first job to hold the slot", lambda: _placed(alice, first["id"]))
        queued = [alice.post("/v1/jobs", json=job_body(f"a{n}", **long)) for n in range(4)]
        assert [reply.status_code for reply in queued] == [201, 201, 201, 429]
        assert "tenants.alice.max_queued_jobs" in queued[3].text
        mine = bob.post("/v1/jobs", json=job_body("b-first", **long))
        assert mine.status_code == 201, "bob's quota is his own"
        alice.delete(f"/v1/jobs/{first['id']}")  # the slot frees: bob is furthest below
        wait_for("bob's job placed before alice's queue", lambda: _placed(bob, mine.json()["id"]))
        assert not any(_placed(alice, reply.json()["id"]) for reply in queued[:3])


def _placed(client: httpx.Client, job_id: str) -> bool:
    return bool(client.get(f"/v1/jobs/{job_id}").json()["gpu_indices"])


def test_a_tenants_datasets_and_workdirs_stay_in_its_roots_and_say_nothing_of_others(
    serve: Callable[..., Daemon], tmp_path: Path
) -> None:
    """Finding 8: a tenant could point `dataset` at any folder the daemon reads (another
    tenant's data), and 422 against 201 told whether <path>/index.json existed."""
    mine, theirs = tmp_path / "alice-data", tmp_path / "bob-data"
    for folder in (mine, theirs):
        folder.mkdir()
    (theirs / "index.json").write_text("{}")
    roots = {"dataset_roots": [str(mine)], "workdir_roots": [str(mine)]}
    daemon = serve(tokens={"admin": ADMIN, "alice": ALICE}, tenants={"alice": roots})
    with daemon.client("alice") as alice:
        answers = {
            str(path): alice.post("/v1/jobs", json=job_body("peek", dataset=str(path)))
            for path in (theirs, tmp_path / "nothing-here", mine / ".." / "bob-data")
        }
        script = [sys.executable, str(SCRIPTS / "show_env.py")]
        outside = {"name": "w", "command": script, "batch_size": 2, "gpus": 1}
        workdirs = [
            alice.post("/v1/jobs", json={**outside, "workdir": str(path)})
            for path in (theirs, tmp_path / "nothing-here")
        ]
    texts = set()
    for path, answer in answers.items():
        assert answer.status_code == 422, path
        (problem,) = answer.json()["detail"]
        assert problem["field"] == "dataset" and "tenants.alice.dataset_roots" in problem["message"]
        texts.add(problem["message"])
    assert len(texts) == 1, "the same answer whether the folder exists or not"
    assert [answer.status_code for answer in workdirs] == [422, 422]
    assert workdirs[0].json() == workdirs[1].json(), "nothing said of what exists"


def test_a_daemon_on_a_copy_of_a_live_state_dir_leaves_the_first_ones_agents_alone(
    serve: Callable[..., Daemon],
) -> None:
    """Finding 6: a daemon started on a copy of a live state dir re-attached by pid and
    argv, got no hello, and SIGTERMed the first daemon's agents."""
    first = serve()
    with first.client() as client:
        job = client.post("/v1/jobs", json=job_body("long", iterations=1_000_000)).json()
        wait_for(
            "it to run", lambda: client.get(f"/v1/jobs/{job['id']}").json()["state"] == "running"
        )
    pid = stored_pid(first.state_dir, job["id"])
    assert pid is not None
    copy = first.state_dir.parent / "copy"
    shutil.copytree(first.state_dir, copy, ignore=shutil.ignore_patterns("*.sock", "daemon.lock"))
    second = serve(state="copy", reattach_timeout_s=1.0)
    with second.client() as client:  # its own copy of the job: relaunched, not adopted
        wait_for(
            "the copy's job relaunched",
            lambda: stored_pid(copy, job["id"]) not in (None, pid),
        )
    with first.client() as client:
        still = client.get(f"/v1/jobs/{job['id']}").json()
    assert alive(pid) and still["state"] == "running" and still["restarts"] == 0
    assert stored_pid(first.state_dir, job["id"]) == pid, "the first daemon's agent, untouched"


def test_a_submit_retried_with_its_idempotency_key_makes_one_job(guarded: Daemon) -> None:
    """Finding 5: a submit whose reply was lost could not be retried safely: 2 jobs were
    committed whose clients saw a connection error."""
    key = {"Idempotency-Key": "train-2026-11-25-a"}
    body = job_body("once", iterations=1_000_000)
    with guarded.client("alice") as alice, guarded.client("bob") as bob:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:  # retries racing the first
            answers = list(
                pool.map(lambda _: alice.post("/v1/jobs", json=body, headers=key), range(4))
            )
        assert sorted(answer.status_code for answer in answers) == [200, 200, 200, 201]
        assert len({answer.json()["id"] for answer in answers}) == 1
        replayed = [a for a in answers if a.status_code == 200]
        assert all(a.headers["Idempotent-Replayed"] == "true" for a in replayed)
        other = alice.post("/v1/jobs", json=job_body("other"), headers=key)
        assert other.status_code == 422 and other.json()["detail"][0]["field"] == "Idempotency-Key"
        assert bob.post("/v1/jobs", json=body, headers=key).status_code == 201, (
            "keys are per tenant"
        )
        assert [job["name"] for job in alice.get("/v1/jobs").json()] == ["once"]
        for client, job in [(c, job) for c in (alice, bob) for job in c.get("/v1/jobs").json()]:
            client.delete(f"/v1/jobs/{job['id']}")  # the daemon is shared: it runs them no more


def test_the_job_list_comes_a_page_at_a_time_and_the_cli_reads_every_page(
    serve: Callable[..., Daemon],
) -> None:
    """Finding 5: GET /v1/jobs had no pagination (608 KB, up to 131 ms at 2,000 jobs)."""
    daemon = serve(tokens={"admin": ADMIN}, node={"cpu_slots": 1, "cpu_workers": 4})
    with daemon.client() as client:
        made = [client.post("/v1/jobs", json=job_body(f"j{n:02d}")).json()["id"] for n in range(7)]
        seen: list[str] = []
        params: dict[str, str | int] = {"limit": 3}
        while True:
            page = client.get("/v1/jobs", params=params)
            assert len(page.json()) <= 3
            seen += [job["id"] for job in page.json()]
            if "X-Next-Cursor" not in page.headers:
                break
            assert 'rel="next"' in page.headers["Link"]
            params = {"limit": 3, "after": page.headers["X-Next-Cursor"]}
        assert seen == made, "every job once, oldest first"
        forged = client.get("/v1/jobs", params={"after": "not-a-cursor"})
        assert forged.status_code == 422 and forged.json()["detail"][0]["field"] == "after"
        made += [
            client.post("/v1/jobs", json=job_body(f"k{n:03d}")).json()["id"] for n in range(500)
        ]  # more than a default page (500)
    listed = stoker("jobs", "--json", "--url", daemon.url, "--token", ADMIN)
    assert listed.code == 0
    assert [job["id"] for job in json.loads(listed.stdout)] == made, "the CLI follows the pages"


def test_a_process_that_takes_a_jobs_identity_cannot_speak_for_it(
    serve: Callable[..., Daemon],
) -> None:
    """Finding 4: a process that took a job's DEALER identity hijacked its heartbeats
    (iteration 999999999, 1e308 samples/s over REST). Each launch now has a secret, in the
    job's environment only, that its agent's messages carry."""
    daemon = serve()
    with daemon.client() as client:
        job = client.post("/v1/jobs", json=job_body("mine", iterations=1_000_000)).json()
        wait_for("it to run", lambda: client.get(f"/v1/jobs/{job['id']}").json()["iteration"] > 0)
        context = zmq.Context()
        rogue = context.socket(zmq.DEALER)
        rogue.setsockopt(zmq.IDENTITY, job["id"].encode())  # the daemon handed the route over
        rogue.setsockopt(zmq.LINGER, 0)
        rogue.connect(f"ipc://{daemon.state_dir / 'agents.sock'}")
        forged = HeartbeatMessage(
            job=job["id"], gen=1, iteration=999_999_999, samples=10**12, idle_s=0.0,
            step_s=1.0, samples_per_s=9e7, workers=1,  # in range: only the secret refuses it
        )  # fmt: skip
        refused_before = client.get("/v1/node").json()["agent_messages_refused"]
        try:
            for secret in ("", "a-guess"):
                rogue.send(encode(forged.model_copy(update={"secret": secret})))
            wait_for(
                "both forgeries refused",
                lambda: (
                    client.get("/v1/node").json()["agent_messages_refused"] >= refused_before + 2
                ),
            )
        finally:
            rogue.close()
            context.term()
        seen = client.get(f"/v1/jobs/{job['id']}").json()
        assert seen["iteration"] < 999_999_999 and (seen["measured_samples_per_s"] or 0) < 9e7
        assert seen["state"] == "running"
        agent = Path(f"/proc/{stored_pid(daemon.state_dir, job['id'])}")
        environ = (agent / "environ").read_bytes()
        assert b"STOKER_AGENT_SECRET=" in environ, "the launch's secret, in its environment"
        assert b"STOKER_AGENT_SECRET" not in (agent / "cmdline").read_bytes(), "never in argv"
        # The rogue took no route (it did, and the agent, cut off, was lost): the agent
        # hears its cancel and stops.
        assert client.delete(f"/v1/jobs/{job['id']}").status_code == 200
        final = wait_for("the cancel obeyed", lambda: ended(client, job["id"]), timeout_s=10)
    assert final["state"] == "cancelled"
    assert "not reachable" not in daemon.log_path.read_text()


def test_no_message_speaks_for_a_job_that_was_never_launched(
    serve: Callable[..., Daemon],
) -> None:
    """A queued job has no launch and so no secret: a `finished` in its name, from any
    process that can reach the agent socket, once completed it without a step."""
    daemon = serve(node={"cpu_slots": 1, "cpu_workers": 18, "max_jobs_per_gpu": 1})
    with daemon.client() as client:
        first = client.post("/v1/jobs", json=job_body("first", iterations=1_000_000)).json()
        queued = client.post("/v1/jobs", json=job_body("queued")).json()
        wait_for(
            "the first to run",
            lambda: client.get(f"/v1/jobs/{first['id']}").json()["iteration"] > 0,
        )
        assert client.get(f"/v1/jobs/{queued['id']}").json()["state"] == "submitted"
        context = zmq.Context()
        rogue = context.socket(zmq.DEALER)
        rogue.setsockopt(zmq.IDENTITY, queued["id"].encode())
        rogue.setsockopt(zmq.LINGER, 0)
        rogue.connect(f"ipc://{daemon.state_dir / 'agents.sock'}")
        refused_before = client.get("/v1/node").json()["agent_messages_refused"]
        try:
            rogue.send(encode(FinishedMessage(job=queued["id"], gen=1, iteration=0)))
            wait_for(
                "the forgery refused",
                lambda: client.get("/v1/node").json()["agent_messages_refused"] > refused_before,
            )
        finally:
            rogue.close()
            context.term()
        assert client.get(f"/v1/jobs/{queued['id']}").json()["state"] == "submitted"
        assert client.delete(f"/v1/jobs/{first['id']}").status_code == 200
        done = wait_for("the queued job to end", lambda: ended(client, queued["id"]), 60)
    assert done["state"] == "completed" and done["iteration"] > 0, "it ran, once its turn came"
