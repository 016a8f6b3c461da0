"""`stoker decoder ...`: the shared decoder device from the command line."""

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

decoder_app = typer.Typer(help="The shared JPEG decoder device.", no_args_is_help=True)


@decoder_app.command("bench")
def bench_command(
    *,
    capacity: Annotated[float, typer.Option(help="the device's samples per second")] = 2000.0,
    shares: Annotated[str, typer.Option(help="one saturating client per share")] = "0.25,0.75",
    seconds: Annotated[float, typer.Option(help="how long to measure")] = 5.0,
    dataset: Annotated[
        Path | None, typer.Option(help="JPEGs to decode [64 made in a temp dir]")
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="one JSON object")] = False,
) -> None:
    """Run one client per share against a fresh emulated device and report what each got."""
    import tempfile  # noqa: PLC0415 (only this command makes images)

    from agents.datafiles import file_name, make_dataset  # noqa: PLC0415
    from fpga_driver.device import DecoderError, bench  # noqa: PLC0415

    try:
        wanted = [float(share) for share in shares.split(",")]
    except ValueError:
        typer.echo(f"error: --shares: numbers in (0, 1] with commas, got {shares!r}", err=True)
        raise typer.Exit(2) from None
    with tempfile.TemporaryDirectory(prefix="stoker-decoder-") as scratch:
        root = dataset or Path(scratch)
        if dataset is None:
            make_dataset(root, images=64, size=64)
        paths = sorted(root.glob("*.jpg"))[:32] or [root / file_name(0)]
        try:
            result = bench(capacity, wanted, seconds, paths, size=32)
        except DecoderError as error:
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(2) from None
    if json_output:
        sys.stdout.write(json.dumps(result) + "\n")
        return
    typer.echo(f"{result['device']}, capacity {capacity:g} samples/s, {seconds:g} s")
    clients = result["clients"]
    assert isinstance(clients, list)
    for client in clients:
        typer.echo(f"  share {client['share']:.2f}: {client['served_per_s']:8.1f} samples/s")
    typer.echo(f"  host CPU: {result['device_cpu_s']:.2f} s")


@decoder_app.command("serve")
def serve_command(
    *,
    endpoint: Annotated[
        str, typer.Option(help="ZeroMQ endpoint to bind \\[ipc://<state-dir>/decoder.sock]")
    ] = "",
    state_dir: Annotated[
        Path,
        typer.Option(
            envvar="STOKER_STATE_DIR",
            help="where the socket goes: the daemon's state dir, where it looks for it",
        ),
    ] = Path(".stoker"),  # the daemon's default state dir
    capacity: Annotated[float, typer.Option(help="the device's samples per second")] = 2000.0,
    latency_ms: Annotated[float, typer.Option(help="per command")] = 2.0,
    units: Annotated[int, typer.Option(help="commands in flight (decode ways)")] = 4,
) -> None:
    """Serve the node's decoder to every job's loaders until Ctrl-C or SIGTERM. The device
    is the EMULATOR (no decoder hardware is supported yet; docs/decoder.md)."""
    import logging  # noqa: PLC0415 (only the long-running command configures logging)
    import signal  # noqa: PLC0415

    from fpga_driver.device import EmulatedDevice  # noqa: PLC0415
    from fpga_driver.errors import DecoderError  # noqa: PLC0415
    from fpga_driver.server import DecoderService  # noqa: PLC0415

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    where = endpoint or f"ipc://{state_dir / 'decoder.sock'}"
    try:
        if where.startswith("ipc://"):
            Path(where.removeprefix("ipc://")).parent.mkdir(parents=True, exist_ok=True)
        device = EmulatedDevice(capacity, latency_s=latency_ms / 1000, units=units)
    except (DecoderError, OSError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    service = DecoderService(device, where)
    try:
        service.bind()
    except Exception as error:  # zmq.ZMQError, OSError: the endpoint is taken or unusable
        device.close()
        typer.echo(f"error: cannot bind {where}: {error}", err=True)
        raise typer.Exit(2) from None
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: service.stop())
    typer.echo(
        f"EMULATED decoder (no hardware), {capacity:g} samples/s, serving on {where}", err=True
    )
    try:
        service.run()
    finally:
        device.close()
    typer.echo("decoder service stopped; every block unlinked", err=True)
