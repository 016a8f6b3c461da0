"""A dataset folder's files: `make_dataset` writes JPEGs of synthetic content and their index
(`stoker dataset make`, `stoker demo`), and the names both sides agree on. numpy and Pillow
only: writing files needs no torch (its import alone is 1.6 s of CPU), and the datasets
that read them are in agents/data.py.
"""

import json
from pathlib import Path

import numpy as np
from PIL import Image

INDEX = "index.json"


class DataError(ValueError):
    """A dataset folder that cannot be used; the message says what to do."""


def file_name(index: int) -> str:
    return f"{index:08d}.jpg"


MAX_READ_LATENCY_S = 10.0


def make_dataset(
    root: Path,
    images: int,
    size: int,
    *,
    classes: int = 10,
    seed: int = 0,
    quality: int = 90,
    read_latency_s: float = 0.0,
) -> Path:
    """Write `images` JPEGs of `size` x `size` pixels and the index; the index path.
    `read_latency_s` > 0: the folder emulates a remote store (module docstring)."""
    if images < 1:
        raise DataError("--images must be at least 1")
    if not 16 <= size <= 4096:
        raise DataError(f"--size must be 16 to 4096 pixels, got {size}")
    if not 0.0 <= read_latency_s <= MAX_READ_LATENCY_S:
        raise DataError(
            f"--read-latency-ms must be 0 to {MAX_READ_LATENCY_S * 1000:.0f} ms,"
            f" got {read_latency_s * 1000:g}"
        )
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, images).tolist()
    y, x = np.mgrid[0:size, 0:size] / size
    for index, label in enumerate(labels):
        phase = rng.uniform(0, 2 * np.pi, 3)
        frequency = 1 + label  # the class is in the pattern's frequency
        channels = [
            127 + 100 * np.sin(2 * np.pi * frequency * (x * np.cos(p) + y * np.sin(p)) + p)
            for p in phase
        ]
        noise = rng.normal(0, 12, (size, size, 3))
        pixels = np.clip(np.stack(channels, axis=-1) + noise, 0, 255).astype(np.uint8)
        Image.fromarray(pixels, "RGB").save(root / file_name(index), quality=quality)
    index_path = root / INDEX
    temporary = index_path.with_suffix(".tmp")
    about: dict[str, object] = {"images": images, "size": size, "classes": classes}
    about["labels"] = labels
    if read_latency_s > 0.0:
        about["read_latency_s"] = read_latency_s
        about["emulated"] = "a remote store: every image read waits read_latency_s first"
    temporary.write_text(json.dumps(about))
    temporary.replace(index_path)
    return index_path
