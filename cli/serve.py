"""`stoker serve` (the daemon) and `stoker agent --simulate` (one simulated job)."""

import errno
import ipaddress
import logging
import os
import socket
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from allocator import POLICIES
from cli.common import fail, print_json
from scheduler.config import DEFAULT_POLICY

_LOG_LEVELS = ("debug", "info", "warning", "error")
_SET = "the settings (config file, STOKER_ variable)"

if TYPE_CHECKING:
    from daemon.config import DaemonConfig
    from tpm import FittedTPM


def register_serve(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.command("node")(node)
    # The agent's own options (--job, --endpoint, ...) pass through without a `--`.
    app.command(
        "agent", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
    )(agent)


def serve(
    *,
    config: Annotated[Path | None, typer.Option(help="a TOML settings file")] = None,
    state_dir: Annotated[Path | None, typer.Option(help="where state lives [.stoker]")] = None,
    host: Annotated[str | None, typer.Option(help="address to bind [127.0.0.1]")] = None,
    port: Annotated[int | None, typer.Option(help="port [8470]")] = None,
    agent_mode: Annotated[
        str | None,
        typer.Option(help="process: PyTorch training per job \\[default]; simulate: no training"),
    ] = None,
    window: Annotated[
        float | None, typer.Option(help="arrival and completion windows, seconds [30]")
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option(help=f"allocation policy, one of: {', '.join(POLICIES)} \\[{DEFAULT_POLICY}]"),
    ] = None,
    log_level: Annotated[str, typer.Option(help=", ".join(_LOG_LEVELS))] = "info",
) -> None:
    """Run the daemon: REST API, agent link, scheduler. Stops cleanly on SIGTERM or Ctrl-C."""
    import uvicorn  # noqa: PLC0415 (the CLI imports what a command needs, when it runs)

    from daemon.api import create_app  # noqa: PLC0415
    from daemon.connections import (  # noqa: PLC0415
        ACCEPT_BACKLOG,
        ConnectionGuard,
        connection_cap,
        guarded_protocol,
        raise_open_file_limit,
    )
    from daemon.private import UMASK  # noqa: PLC0415
    from daemon.stopping import Server  # noqa: PLC0415

    _configure_logging(log_level)
    overrides: dict[str, object] = {
        "state_dir": state_dir,
        "host": host,
        "port": port,
        "agent_mode": agent_mode,
    }
    settings = _settings(config, overrides, policy=policy, window=window)
    _warn_of_exposure(settings, config)
    # What the checks below make (the state dir, its database) is the daemon's alone from
    # the start, as what the daemon makes is: not made open, then closed with a warning.
    os.umask(UMASK)
    _check_can_start(settings)
    model = _model(settings)
    typer.echo(
        f"stoker: serving http://{settings.host}:{settings.port}/docs, state in "
        f"{settings.state_dir.resolve()}, policy {settings.scheduler.policy}",
        err=True,
    )
    app = create_app(settings, model)
    # Slow clients are bounded where connections are accepted (daemon/connections.py).
    limits = settings.limits
    cap = connection_cap(limits.max_connections, raise_open_file_limit())
    served = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=log_level.lower(),
        timeout_graceful_shutdown=10,
        http=guarded_protocol(ConnectionGuard(limits, cap)),
        ws="none",  # the API has no websockets; an upgrade would leave the guard's count
        timeout_keep_alive=max(1, round(limits.idle_timeout_s)),
        backlog=ACCEPT_BACKLOG,
    )
    Server(served, app).run()  # ends open streams at once when told to stop


def _configure_logging(log_level: str) -> None:
    """The daemon's logging at `log_level`, or a failure naming the levels there are."""
    if log_level.lower() not in _LOG_LEVELS:
        fail(f"--log-level: {log_level!r} is none of {', '.join(_LOG_LEVELS)}")
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def _settings(
    config: Path | None,
    overrides: dict[str, object],
    *,
    policy: str | None,
    window: float | None,
) -> "DaemonConfig":
    """The daemon's settings: `config`'s (with the STOKER_ variables) under the command
    line's `overrides`, `policy` and `window`; a failure saying which is wrong."""
    from daemon.config import ConfigError, load_config, with_scheduler  # noqa: PLC0415

    try:
        settings = load_config(config, **overrides)
        changed: dict[str, object] = {"policy": policy} if policy else {}
        if window is not None:
            changed |= {"arrival_window_s": window, "completion_window_s": window}
        if changed:
            settings = with_scheduler(settings, **changed)
    except ConfigError as error:
        fail(str(error))
    except ValueError as error:
        fail(f"--policy or --window: {error}")
    return settings


def _warn_of_exposure(settings: "DaemonConfig", config: Path | None) -> None:
    """Warn where tokens could be read by others: on the network, in clear text, when the
    daemon listens beyond this machine; in `config`, when other users may read it."""
    if not _loopback(settings.host):
        logging.getLogger("stoker.serve").warning(
            "listening on %s over plain HTTP: tokens cross the network in clear text; put a"
            " TLS proxy in front (docs/operations.md) or keep the daemon on 127.0.0.1",
            settings.host,
        )
    written = tomllib.loads(config.read_text()) if config is not None else {}
    if config is not None and written.get("tokens") and config.stat().st_mode & 0o044:
        logging.getLogger("stoker.serve").warning(
            "%s holds the tenants' tokens and other users may read it (mode %o): chmod 600 it",
            config,
            config.stat().st_mode & 0o777,
        )


def _check_can_start(settings: "DaemonConfig") -> None:
    """Refuse a state dir or a port the daemon could not start on (_check_state,
    _check_port), in the order that names the likelier cause."""
    # A daemon already on this state dir is named by its pid, before its port is found
    # taken; a new state dir is made only once the port is free.
    existing = settings.state_dir.is_dir()
    if existing:
        _check_state(settings)
    _check_port(settings.host, settings.port)
    if not existing:
        _check_state(settings)


def _model(settings: "DaemonConfig") -> "FittedTPM":
    """The throughput model the daemon plans with until a refit, or a failure saying why
    it cannot be read."""
    from daemon.api import load_model  # noqa: PLC0415
    from tpm import TpmError  # noqa: PLC0415

    try:
        return load_model(settings)
    except TpmError as error:
        fail(str(error))
    except OSError as error:
        fail(f"tpm: cannot read {settings.tpm}: {error}")


def _check_state(settings: "DaemonConfig") -> None:
    """Refuse, in one line, a state dir that cannot be one (a file, a read-only folder),
    one another daemon holds, one whose database is lost, corrupt or unreadable, or one
    holding unfinished jobs of tenants this config does not name: rather than a traceback
    from uvicorn's start-up."""
    from daemon.statelock import StateDirLock, StoreError  # noqa: PLC0415
    from daemon.store import Store  # noqa: PLC0415
    from daemon.tenants import check_stored_tenants  # noqa: PLC0415

    state_dir = settings.state_dir
    try:
        lock = StateDirLock(state_dir)
        try:
            store = Store(state_dir / "stoker.db")
            try:
                check_stored_tenants(store, settings)
            finally:
                store.close()
        finally:
            lock.release()
    except StoreError as error:
        fail(str(error))
    except OSError as error:
        where = f": {error.filename}" if error.filename is not None else ""
        fail(
            f"state dir: {state_dir} cannot be used ({error.strerror or error}{where});"
            " give --state-dir (or STOKER_STATE_DIR) a folder this user may write"
        )


def _loopback(host: str) -> bool:
    """Whether `host` is reached from this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: resolved elsewhere, taken as reachable from outside
        return False


def _check_port(host: str, port: int) -> None:
    """Refuse at once, naming the fix, a port that uvicorn could not bind: it would fail
    after start-up with its own log line and status 3. (Something may still take the port
    in between: uvicorn then says so as before.)"""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        fail(
            f"host: cannot bind {host!r} ({error.strerror}); pass --host with an address"
            " of this machine"
        )
    family, kind, proto, _, address = addresses[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                fail(
                    f"port: {host}:{port} is in use, by another daemon or another program; "
                    "stop it, or pass --port N (or set STOKER_PORT)"
                )
            if error.errno == errno.EADDRNOTAVAIL:
                fail(f"host: {host} is no address of this machine; pass --host")
            # Anything else (a port below 1024 without the right to it, say) is uvicorn's to
            # refuse, as before this check.


def agent(
    simulate: Annotated[bool, typer.Option(help="speak the protocol, train nothing")] = False,
    args: Annotated[list[str] | None, typer.Argument(help="agent options (see --help)")] = None,
) -> None:
    """Run one zoo job's trainer: the built-in one, an SDK script (`python -m agents.zoo`,
    which the daemon's launcher runs), or with --simulate an agent that trains nothing."""
    if simulate:
        from agents.simulated import main as simulated  # noqa: PLC0415

        raise typer.Exit(simulated(args or []))
    from agents.zoo import main  # noqa: PLC0415 (torch stays out of the daemon's imports)

    raise typer.Exit(main(args or []))


def node(
    *,
    config: Annotated[Path | None, typer.Option(help="a TOML settings file, as for serve")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="as JSON")] = False,
) -> None:
    """What this host gives a daemon started here (CPUs it may use, GPUs), and the node
    settings `stoker serve` would use: those the config sets, the rest chosen from the host."""
    from daemon.config import ConfigError, load_config  # noqa: PLC0415
    from daemon.host import detect_node, host_summary  # noqa: PLC0415

    try:
        settings = load_config(config).node
    except ConfigError as error:
        fail(str(error))
    found = host_summary(detect_node(settings))
    if json_output:
        print_json(found)
        return
    chosen = set(found["chosen_from_host"])
    quota = f", cgroup quota {found['cpu_quota']:g}" if found["cpu_quota"] is not None else ""
    slots = "GPUs" if found["gpus"] else "CPU training slots"
    lines = [
        f"CPUs    {found['cpus_usable']} usable: affinity {found['cpu_affinity']} of "
        f"{found['cpus_online']} online{quota} (limited by {found['cpus_limited_by']})",
        f"GPUs    {found['gpus']} "
        + (
            "(node.gpus)"
            if "gpus" not in chosen
            else "(NVML)"
            if found["gpus"]
            else "(NVML finds none)"
        ),
        "",
        "node setting      value  from",
        f"slots             {found['slots']:>5}  "
        # The GPUs on a GPU node, else the CPU slots, each from the host unless configured.
        + ("the host" if ("gpus" if found["gpus"] else "cpu_slots") in chosen else _SET)
        + f" ({slots})",
        f"cpu_workers       {found['cpu_workers']:>5}  "
        + (_workers_from_host(found) if "cpu_workers" in chosen else _SET),
        f"threads_per_slot  {found['threads_per_slot']:>5}  the host (a job's intra-op threads)",
    ]
    if found["cpu_sets"]:  # node.cpu_sets: each slot's CPUs while every slot holds a job
        groups = "  ".join(
            f"{slot}: {','.join(map(str, cpus))}" for slot, cpus in enumerate(found["cpu_sets"])
        )
        lines.append(f"cpu_sets          {groups}  (each slot's CPUs when all are busy)")
    usable = found["cpus_usable"]
    if "cpu_workers" not in chosen and found["cpu_workers"] > 2 * usable:
        lines.append(
            f"warning: cpu_workers {found['cpu_workers']} on {usable} usable CPUs: that many"
            " loader processes contend for them (unset, it is chosen from the host)"
        )
    typer.echo("\n".join(lines))


def _workers_from_host(found: dict[str, Any]) -> str:
    """Where the default loader processes came from: the CPUs training leaves, or, on a
    small host without GPUs, the floor of two a slot (daemon/host.py)."""
    slots, usable = found["slots"], found["cpus_usable"]
    spare = usable - max(slots, usable // 2)  # what training leaves (daemon/host.py)
    if not found["gpus"] and spare < 2 * slots:
        return "the host (a small one: two a CPU slot, to share when jobs come and go)"
    return "the host (usable CPUs less training's)"
