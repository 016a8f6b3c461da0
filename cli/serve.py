"""`stoker serve` (the daemon) and `stoker agent --simulate` (one simulated job)."""

import logging
from pathlib import Path
from typing import Annotated

import typer

from cli.common import fail


def register_serve(app: typer.Typer) -> None:
    app.command("serve")(serve)
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
        typer.Option(help="process: PyTorch training per job [default]; simulate: no training"),
    ] = None,
    window: Annotated[
        float | None, typer.Option(help="arrival and completion windows, seconds [30]")
    ] = None,
    policy: Annotated[str | None, typer.Option(help="allocation policy [optimal]")] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning")] = "info",
) -> None:
    """Run the daemon: REST API, agent link, scheduler. Stops cleanly on SIGTERM or Ctrl-C."""
    import uvicorn  # noqa: PLC0415 (the CLI imports what a command needs, when it runs)

    from daemon.api import create_app, load_model  # noqa: PLC0415
    from daemon.config import ConfigError, load_config, with_scheduler  # noqa: PLC0415
    from daemon.statelock import StateDirLock, StoreError  # noqa: PLC0415
    from tpm import TpmError  # noqa: PLC0415

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    overrides: dict[str, object] = {
        "state_dir": state_dir,
        "host": host,
        "port": port,
        "agent_mode": agent_mode,
    }
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
    try:  # a clear refusal now, rather than a traceback from uvicorn's start-up
        StateDirLock(settings.state_dir).release()
    except StoreError as error:
        fail(str(error))
    try:
        model = load_model(settings)
    except TpmError as error:
        fail(str(error))
    except OSError as error:
        fail(f"tpm: cannot read {settings.tpm}: {error}")
    typer.echo(
        f"stoker: serving http://{settings.host}:{settings.port}/docs, state in "
        f"{settings.state_dir.resolve()}, policy {settings.scheduler.policy}",
        err=True,
    )
    uvicorn.run(
        create_app(settings, model),
        host=settings.host,
        port=settings.port,
        log_level=log_level.lower(),
        timeout_graceful_shutdown=10,
    )


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
