"""Training data for the zoo trainer (agents/zoo.py): a folder of real JPEG files, a Pillow
decode and augmentation pipeline, and the epoch order that makes every sample count once.

- `make_dataset(root, images, size)` writes `images` JPEG files of synthetic content
  (smooth colour fields with a class-dependent pattern, so there is something to learn)
  and `index.json` (count, size, classes, labels). `stoker dataset make` calls it.
- A folder made with `read_latency_s` emulates a remote store (an object store or a
  network filesystem, which this machine does not have): every read of an image first
  waits that long, without CPU, as a fetch over the network does. The folder's index says
  so, and the zoo trainer's log; `JpegDataset` waits (a script that reads the files itself
  does not), and `stoker profile` refuses such a folder. Loading such data is bound by the
  wait, not by the CPU: more loader workers fetch more at once.
- `JpegDataset` is cheap to pickle: a root, a count and a labels tuple; file names are
  derived from the index (`00000042.jpg`), so a DataLoader's workers start fast.
- Augmentation (random resized crop, horizontal flip, normalise) draws from a generator
  seeded by (seed, epoch, index): a sample looks the same whichever worker decodes it and
  however often the job was resized, so a resumed epoch is the epoch it would have been.
- `DeviceBatches` is the same data in decode mode `device`: a batch at a time (an item, or
  `samples(batch)`); the DataLoader worker sends it to the node's decoder service as one
  command (decode and resize on the device) and only augments the pixels it gets back, with
  the same per-sample seeds, so a job can switch modes at a pause and its epoch goes on.
- `EpochOrder` is the permutation of an epoch from (seed, epoch) and a cursor of consumed
  samples; `batches(rank, world, batch_size)` yields each rank's share of every global batch
  from the cursor on. Across any number of pauses, every sample of an epoch is consumed
  exactly once.
"""

import json
import math
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from agents.datafiles import INDEX, MAX_READ_LATENCY_S, DataError, file_name
from fpga_driver.client import DecoderClient

MEAN = (0.485, 0.456, 0.406)  # ImageNet statistics, as the paper's pipeline normalises
STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Augment:
    """Random resized crop to `size`, horizontal flip, normalise (the ImageNet recipe)."""

    size: int
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)

    def __call__(self, image: Image.Image, rng: random.Random) -> torch.Tensor:
        left, top, width, height = self._crop_box(image.width, image.height, rng)
        image = image.resize(
            (self.size, self.size),
            Image.Resampling.BILINEAR,
            box=(left, top, left + width, top + height),
        )
        if rng.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        pixels = np.asarray(image, dtype=np.float32) / np.float32(255.0)
        scaled = (pixels - np.array(MEAN, dtype=np.float32)) / np.array(STD, dtype=np.float32)
        return torch.from_numpy(np.ascontiguousarray(scaled.transpose(2, 0, 1)))

    def _crop_box(self, width: int, height: int, rng: random.Random) -> tuple[int, int, int, int]:
        area = width * height
        for _ in range(10):
            target = area * rng.uniform(*self.scale)
            aspect = math.exp(rng.uniform(math.log(self.ratio[0]), math.log(self.ratio[1])))
            w = round(math.sqrt(target * aspect))
            h = round(math.sqrt(target / aspect))
            if 0 < w <= width and 0 < h <= height:
                return rng.randint(0, width - w), rng.randint(0, height - h), w, h
        side = min(width, height)  # fall back to the centre square
        return (width - side) // 2, (height - side) // 2, side, side


class JpegDataset(Dataset[tuple[torch.Tensor, int]]):
    """Samples of a `make_dataset` folder, decoded by Pillow and augmented (cropped to
    `image_size`, or to the size its images were made at); `epoch` must be set before each
    epoch's pass (the augmentation seed depends on it). It lives in memory the loader's
    workers share, so persistent workers see each epoch the main process sets. A folder
    that emulates a remote store (`read_latency_s` in its index) waits before each read."""

    def __init__(self, root: Path, image_size: int | None = None, seed: int = 0) -> None:
        try:
            index = json.loads((root / INDEX).read_text())
        except FileNotFoundError:
            raise DataError(
                f"{root}: no {INDEX}; make a dataset with `stoker dataset make {root}`"
            ) from None
        self.root = str(root)
        # An int16 array pickles as raw bytes: 2 bytes a sample for each worker's copy.
        self.labels = np.asarray(index["labels"], dtype=np.int16)
        self.classes = int(index["classes"])
        self.image_size = image_size or int(index["size"])
        self.read_latency_s = float(index.get("read_latency_s", 0.0))
        if not 0.0 <= self.read_latency_s <= MAX_READ_LATENCY_S:
            raise DataError(
                f"{root / INDEX}: read_latency_s must be 0 to {MAX_READ_LATENCY_S:g} s, got "
                f"{self.read_latency_s:g}; make the folder again with `stoker dataset make`"
            )
        self.augment = Augment(self.image_size)
        self.seed = seed
        epoch = torch.zeros(1, dtype=torch.int64)
        self._epoch = epoch.share_memory_()  # type: ignore[no-untyped-call]

    @property
    def epoch(self) -> int:
        return int(self._epoch[0])

    @epoch.setter
    def epoch(self, value: int) -> None:
        self._epoch[0] = value

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        self.fetch(1)
        with Image.open(Path(self.root) / file_name(index)) as image:
            tensor = self.augment(image.convert("RGB"), self.rng(index))
        return tensor, int(self.labels[index])

    def rng(self, index: int) -> random.Random:
        """The augmentation draws of sample `index` in this epoch, whoever decodes it."""
        return random.Random(hash((self.seed, self.epoch, index)))

    def fetch(self, images: int) -> None:
        """Wait as a remote store would to hand over `images` files, one after another
        (nothing on a local folder)."""
        if self.read_latency_s > 0.0:
            time.sleep(self.read_latency_s * images)


class DeviceBatches(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """A `JpegDataset`'s batches decoded by the decoder service (decode mode `device`).

    Items are lists of sample indices (use it with `batch_size=None`). Each DataLoader
    worker opens its own connection on first use, registered for `job` at `share`; the
    device decodes and resizes a batch to `decode_size` in one command, and the worker
    crops, flips and normalises each sample like the CPU pipeline. Cheap to pickle: the
    connection is made in the worker, never sent to it."""

    def __init__(
        self,
        images: JpegDataset,
        *,
        endpoint: str,
        job: str,
        share: float,
        max_batch: int,
    ) -> None:
        self.images, self.endpoint, self.job = images, endpoint, job
        self.share, self.max_batch = share, max_batch
        # The device's resizer makes the crop's source, as the CPU pipeline's full image is:
        # 8/7 of the crop, the ImageNet recipe's 256 for 224.
        self.decode_size = images.augment.size * 8 // 7
        self._client: DecoderClient | None = None

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, batch: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        samples = self.samples(batch)
        images, labels = zip(*samples, strict=True)
        return torch.stack(images), torch.tensor(labels)

    def samples(self, batch: list[int]) -> list[tuple[torch.Tensor, int]]:
        """The samples of `batch` as `JpegDataset` gives them, decoded in one command."""
        client = self._connect()
        self.images.fetch(len(batch))  # the device decodes what the worker fetched
        paths = [Path(self.images.root) / file_name(index) for index in batch]
        pixels = client.decode(paths)
        return [
            (
                self.images.augment(Image.fromarray(pixels[position]), self.images.rng(index)),
                int(self.images.labels[index]),
            )
            for position, index in enumerate(batch)
        ]

    def _connect(self) -> "DecoderClient":
        if self._client is None:
            self._client = DecoderClient(
                self.endpoint,
                self.job,
                self.share,
                max_batch=self.max_batch,
                size=self.decode_size,
                blocks=2,
            )
        return self._client

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_client": None}  # a worker makes its own connection


@dataclass
class EpochOrder:
    """Where a job is in its data: the epoch, and how many of its samples are consumed."""

    samples: int
    seed: int = 0
    epoch: int = 0
    cursor: int = 0  # samples of this epoch consumed by all ranks together
    shuffle: bool = True  # False: every epoch in index order

    def permutation(self) -> list[int]:
        if not self.shuffle:
            return list(range(self.samples))
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return torch.randperm(self.samples, generator=generator).tolist()

    def global_batches(self, batch_size: int, world: int) -> list[list[int]]:
        """Every global batch from the cursor to the epoch's end. A last batch smaller than
        `world` joins the one before it, so that every rank has a sample in every step (a
        rank with none would leave the others waiting in their collectives)."""
        order = self.permutation()[self.cursor :]
        chunks = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
        if len(chunks) > 1 and len(chunks[-1]) < world:
            tail = chunks.pop()
            chunks[-1] = chunks[-1] + tail
        return chunks

    def batch_count(self, batch_size: int, world: int, drop_last: bool = False) -> int:
        """How many global batches `global_batches` makes from the cursor (without a last
        one smaller than `batch_size` when `drop_last`), counted without the permutation."""
        left = max(0, self.samples - self.cursor)
        count = -(-left // batch_size)
        last = left % batch_size or batch_size
        if count > 1 and last < world:
            count -= 1  # the small tail joins the batch before it
        elif drop_last and count and last < batch_size:
            count -= 1
        return count

    def batches(self, rank: int, world: int, batch_size: int) -> Iterator[list[int]]:
        """Rank `rank`'s share of every global batch from the cursor on: the batch split
        into `world` parts whose sizes differ by one at most."""
        for batch in self.global_batches(batch_size, world):
            yield batch[rank * len(batch) // world : (rank + 1) * len(batch) // world]

    def advance(self, consumed: int) -> None:
        """Count `consumed` samples (all ranks); roll into the next epoch at its end."""
        self.cursor += consumed
        if self.cursor >= self.samples:
            self.epoch, self.cursor = self.epoch + 1, 0
