"""The `stoker` commands that need torch: `stoker dataset make`. Torch is imported inside
the commands, so that the daemon's other commands (and `stoker serve`) never load it."""

from pathlib import Path
from typing import Annotated

import typer

dataset_app = typer.Typer(
    help="Make training data for the application masters.", no_args_is_help=True
)


@dataset_app.command("make")
def make_command(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="where the images go")],
    *,
    images: Annotated[int, typer.Option(help="how many JPEG files")] = 1000,
    size: Annotated[int, typer.Option(help="width and height in pixels")] = 64,
    classes: Annotated[int, typer.Option(help="labels to draw from")] = 10,
    seed: Annotated[int, typer.Option(help="same seed, same images")] = 0,
) -> None:
    """Write a folder of real JPEG files with synthetic content and its index.json."""
    from agents.data import DataError, make_dataset  # noqa: PLC0415 (torch stays lazy)

    try:
        index = make_dataset(directory, images, size, classes=classes, seed=seed)
    except DataError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"{images} images of {size} x {size} px in {directory}; index {index}")
