"""The `stoker` commands that need torch: `stoker dataset make` and `stoker profile`. Torch
is imported inside the commands, so that the daemon's other commands (and `stoker serve`)
never load it."""

from pathlib import Path
from typing import Annotated

import typer

dataset_app = typer.Typer(
    help="Make JPEG datasets for zoo jobs, the demo and the benchmarks to train on.",
    no_args_is_help=True,
)


@dataset_app.command("make")
def make_command(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="where the images go")],
    *,
    images: Annotated[int, typer.Option(help="how many JPEG files")] = 1000,
    size: Annotated[int, typer.Option(help="width and height in pixels")] = 64,
    classes: Annotated[int, typer.Option(help="labels to draw from")] = 10,
    seed: Annotated[int, typer.Option(min=0, help="same seed, same images")] = 0,
    read_latency_ms: Annotated[
        float,
        typer.Option(
            help="emulate a remote store (object store, network filesystem): every image"
            " read waits this long first, without CPU; 0 = a local folder"
        ),
    ] = 0.0,
) -> None:
    """Write a folder of real JPEG files with synthetic content and its index.json."""
    from agents.datafiles import DataError, make_dataset  # noqa: PLC0415 (torch stays lazy)

    try:
        index = make_dataset(
            directory,
            images,
            size,
            classes=classes,
            seed=seed,
            read_latency_s=read_latency_ms / 1000,
        )
    except DataError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"{images} images of {size} x {size} px in {directory}; index {index}")
    if read_latency_ms > 0:
        typer.echo(f"an emulated remote store: every read waits {read_latency_ms:g} ms first")


def profile_command(
    *,
    dataset: Annotated[Path, typer.Option(help="a `stoker dataset make` folder")],
    out: Annotated[Path, typer.Option(help="where training.csv and loading.csv go")],
    models: Annotated[
        str, typer.Option(help="zoo names, comma-separated")
    ] = "smResnet20,mdResnet12,smVGG7",
    batch_sizes: Annotated[str, typer.Option(help="per-GPU batches, comma-separated")] = "8,16,32",
    max_workers: Annotated[int, typer.Option(help="loading samples for 1 .. this many")] = 4,
    image_size: Annotated[int, typer.Option(help="crop size fed to the models")] = 32,
    decoder_endpoint: Annotated[
        str | None,
        typer.Option(help="also profile decoding on this decoder service (imagenet+device)"),
    ] = None,
) -> None:
    """Collect the TPM's samples on this node (paper Sec. III-B) for `stoker tpm fit`."""
    from agents.datafiles import DataError  # noqa: PLC0415 (torch stays lazy)
    from agents.profile import ProfileOptions, profile  # noqa: PLC0415

    try:
        options = ProfileOptions(
            dataset=dataset,
            out=out,
            models=tuple(name.strip() for name in models.split(",") if name.strip()),
            batch_sizes=tuple(int(size) for size in batch_sizes.split(",")),
            max_workers=max_workers,
            image_size=image_size,
            decoder_endpoint=decoder_endpoint,
        )
        training, loading = profile(options, lambda line: typer.echo(line, err=True))
    except (DataError, ValueError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {training} and {loading}; next: stoker tpm fit {training} {loading}")
