"""A zoo job's dataset, checked when it is submitted (the built-in trainer reads it), and
the size of the images the trainer feeds its model, which the job's FLOPs depend on."""

import json
from pathlib import Path

from daemon.items import SubmitError


def check_dataset(dataset: Path, batch_size: int) -> None:
    """A zoo job's dataset exists and holds at least one global batch (the trainer would
    otherwise train on fewer samples per step than asked, without a word)."""
    images = _index_number(dataset, "images")
    if images is None:
        raise SubmitError(
            "dataset", f"{dataset} holds no dataset; make one with `stoker dataset make`"
        )
    if batch_size > images:
        raise SubmitError(
            "batch_size",
            f"{batch_size} is more than the {images} images of {dataset}; use at most "
            f"{images}, or make a larger dataset (`stoker dataset make --images N`)",
        )


IMAGENET_SIZE = 224  # what the zoo's FLOPs are counted at when nothing else is known


def zoo_image_size(configured: int | None, dataset: str | Path | None) -> int:
    """The side of the images a zoo job's model sees: `training.image_size` when set, as
    the trainer crops to it, else the dataset's own size (its index), as the trainer then
    uses; 224 when neither is known (a dataset gone since the submission)."""
    if configured:
        return configured
    size = _index_number(Path(dataset), "size") if dataset is not None else None
    return size if size is not None else IMAGENET_SIZE


def _index_number(dataset: Path, key: str) -> int | None:
    """A number from the index `stoker dataset make` writes; None when there is none."""
    try:
        return int(json.loads((dataset / "index.json").read_text())[key])
    except (OSError, ValueError, KeyError, TypeError):
        return None
