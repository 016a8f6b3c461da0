"""Per-tenant unix users: their config, their own agent sockets, and the warnings an
operator gets without them. Real ZeroMQ sockets; the user is `nobody`."""

import asyncio
import os
import pwd
import shutil
import stat
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
import zmq

from agents.protocol import Hello, encode
from daemon.agentlink import AgentLink
from daemon.config import ConfigError, DaemonConfig, load_config
from daemon.statelock import StoreError
from daemon.store import JobRecord, Store
from daemon.tenants import (
    UnixUser,
    check_stored_tenants,
    closed_parents,
    unix_users,
    user_warnings,
)

ROOT = os.geteuid() == 0


def job_record(job_id: str, *, tenant: str, state: str = "submitted") -> JobRecord:
    spec = {"command": ["python", "train.py"], "batch_size": 8, "gpus": 1}
    return JobRecord(job_id, tenant, job_id, spec, state, 1.0, 1.0, 0, "", None)


NOBODY = pwd.getpwnam("nobody")


def test_an_unknown_unix_user_is_refused_naming_the_tenant(tmp_path: Path) -> None:
    config = tmp_path / "daemon.toml"
    config.write_text('[unix_users]\nalice = "no-such-user-here"\n')
    with pytest.raises(ConfigError, match=r"unix_users.*alice: no unix user 'no-such-user-here'"):
        load_config(config)


def test_unix_users_need_a_root_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("daemon.config.settings.os.geteuid", lambda: 1000)
    with pytest.raises(ValueError, match="only when the daemon runs as root"):
        DaemonConfig(unix_users={"alice": "nobody"})


def test_the_operator_is_told_whom_jobs_run_as(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("daemon.tenants.os.geteuid", lambda: 0)
    config = DaemonConfig.model_construct(
        tokens={"admin": "a" * 20, "alice": "b" * 20, "bob": "c" * 20},
        unix_users={"alice": "nobody"},
    )
    users = unix_users(config)
    assert users["alice"].uid == NOBODY.pw_uid
    (warning,) = user_warnings(config, users)
    assert "admin, bob run as root" in warning and "unix_users" in warning
    root = UnixUser("root", 0, 0, "/root")  # mapped, yet root all the same
    each = {"admin": root, "alice": users["alice"], "bob": replace(users["alice"], name="b")}
    (warning,) = user_warnings(config, each)
    assert warning.startswith("jobs of admin run as root")
    apart = {**each, "admin": replace(users["alice"], name="a")}
    assert user_warnings(config, apart) == ()
    (warning,) = user_warnings(config, {**apart, "bob": users["alice"]})
    assert "jobs of alice, bob run as one unix user, nobody" in warning
    monkeypatch.setattr("daemon.tenants.os.geteuid", lambda: NOBODY.pw_uid)
    (warning,) = user_warnings(config, {})
    assert "jobs run as the daemon's own user (nobody)" in warning


@pytest.mark.skipif(not ROOT, reason="sockets are handed to another user only by root")
def test_a_tenants_socket_is_its_users_and_speaks_for_its_jobs_only(tmp_path: Path) -> None:
    alice = UnixUser("nobody", NOBODY.pw_uid, NOBODY.pw_gid, NOBODY.pw_dir)
    owners = {"alices-job": "nobody", "bobs-job": None}
    link = AgentLink(tmp_path / "agents.sock", [alice], owners.get)
    link.bind()
    path = tmp_path / "agents-nobody.sock"
    info = path.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (NOBODY.pw_uid, 0o600)
    assert stat.S_IMODE((tmp_path / "agents.sock").stat().st_mode) == 0o600
    assert link.endpoint_for("nobody") == f"ipc://{path}"

    async def exchange() -> list[str]:
        context = zmq.Context()
        heard = []
        for job in ("bobs-job", "alices-job"):  # both through alice's socket
            dealer = context.socket(zmq.DEALER)
            dealer.setsockopt(zmq.IDENTITY, job.encode())
            dealer.setsockopt(zmq.LINGER, 0)
            dealer.connect(link.endpoint_for("nobody"))
            dealer.send(encode(Hello(job=job, pid=1)))
            message = await link.receive(timeout_s=2.0)
            heard.append(message.job if message is not None else "refused")
            dealer.close()
        context.term()
        return heard

    assert asyncio.run(exchange()) == ["refused", "alices-job"]
    assert link.malformed == 1, "bob's job cannot be spoken for on alice's socket"
    link.close()
    assert not path.exists()


def test_a_start_without_the_config_naming_a_tenant_with_unfinished_jobs_is_refused(
    tmp_path: Path,
) -> None:
    # Restarted as `stoker serve --state-dir ...` without the config that maps alice to
    # her unix user, a root daemon would launch her queued job as root.
    store = Store(tmp_path / "stoker.db")
    store.add_job(job_record("old", tenant="carol", state="completed"))  # ended: no matter
    store.add_job(job_record("queued", tenant="alice"))
    with_alice = DaemonConfig.model_construct(tokens={"admin": "a" * 20, "alice": "b" * 20})
    check_stored_tenants(store, with_alice)
    with pytest.raises(StoreError) as refused:
        check_stored_tenants(store, DaemonConfig.model_construct(tokens={}))
    assert str(refused.value).startswith(
        f"{tmp_path} holds unfinished jobs of alice, whom this config gives no token (it"
        " names admin): start the daemon with the config that names them (--config FILE)"
    )
    store.close()


def test_a_state_dir_behind_a_closed_folder_is_said_when_jobs_run_as_other_users() -> None:
    # Under /tmp, not pytest's tmp_path: its folders are root's alone (0700).
    top = Path(tempfile.mkdtemp(prefix="stoker-parents-"))
    try:
        _closed_on_the_way(top)
    finally:
        shutil.rmtree(top)


def _closed_on_the_way(top: Path) -> None:
    top.chmod(0o755)
    closed = top / "private"
    state = closed / "state"
    state.mkdir(parents=True)
    closed.chmod(0o700)
    nobody = UnixUser("nobody", NOBODY.pw_uid, NOBODY.pw_gid, "/")
    (warning,) = closed_parents(state, {"alice": nobody})
    assert warning.startswith(f"{closed} (mode 700) lets no other user through")
    assert f"`chmod o+x {closed}`" in warning
    assert closed_parents(state, {}) == (), "jobs run as the daemon's user: no matter"
    closed.chmod(0o711)
    assert closed_parents(state, {"alice": nobody}) == ()
