"""Profiling for the throughput model (paper Sec. III-B): `stoker profile`.

- Training samples: each model at each per-GPU batch size trains on one cached batch
  replayed, so the input stall is removed and the step is all there is (forward, backward,
  update, synchronised on a GPU). The median of the timed steps is the sample.
- Loading samples: one DataLoader alone on the node, over the dataset through the job
  pipeline (Pillow decode, random resized crop, flip, normalise), for 1 to `max_workers`
  worker processes; the rate is mini-batches per second once the workers are warm. With a
  decoder service (`decoder_endpoint`), the same again in decode mode `device`, as pipeline
  `imagenet+device`: the daemon's throughput model reads c' (augment only) from it. The
  service's capacity must exceed what the workers can augment, or the device, not the
  workers, sets the rate.

It writes `training.csv` and `loading.csv` with the columns `stoker tpm fit` reads. Small
on a CPU node (the defaults); on a GPU node pass the zoo's models and real batch sizes.
"""

import csv
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from agents.data import DeviceBatches, EpochOrder, JpegDataset
from agents.datafiles import DataError
from agents.models import build, cached_measure
from tpm.zoo import CLASSES

PIPELINE = "imagenet"  # the pipeline id jobs load with (scheduler.messages)
DEVICE_PIPELINE = f"{PIPELINE}+device"  # scheduler.messages.device_pipeline(PIPELINE)


@dataclass(frozen=True)
class ProfileOptions:
    dataset: Path
    out: Path
    models: tuple[str, ...] = ("smResnet20", "mdResnet12", "smVGG7")
    batch_sizes: tuple[int, ...] = (8, 16, 32)
    max_workers: int = 4
    image_size: int = 32
    timed_steps: int = 5
    timed_batches: int = 12
    decoder_endpoint: str | None = None  # also profile decode mode `device` through it


def profile(options: ProfileOptions, progress: Callable[[str], None]) -> tuple[Path, Path]:
    """Measure and write both sample files; their paths."""
    loading_batches = sorted(set(options.batch_sizes))
    needed = (options.max_workers + options.timed_batches) * max(loading_batches)
    dataset = JpegDataset(options.dataset, options.image_size)
    if dataset.read_latency_s > 0.0:
        raise DataError(
            f"{options.dataset} emulates a remote store (every read waits "
            f"{dataset.read_latency_s * 1000:g} ms): its loading samples would time the wait, "
            "not this node's CPUs; profile a local folder (`stoker dataset make` without "
            "--read-latency-ms)"
        )
    images = len(dataset)
    if images < needed:
        raise DataError(
            f"{options.dataset} has {images} images; loading samples need {needed} "
            f"(({options.max_workers} workers + {options.timed_batches} timed batches) x "
            f"batch {max(loading_batches)}): make it with --images {needed} or more"
        )
    options.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    training = [
        _training_row(model, batch, options, device, progress)
        for model in options.models
        for batch in options.batch_sizes
    ]
    modes = [None] if options.decoder_endpoint is None else [None, options.decoder_endpoint]
    loading = [
        _loading_row(workers, batch, options, progress, decoder)
        for decoder in modes
        for batch in loading_batches
        for workers in range(1, options.max_workers + 1)
    ]
    return (
        _write(options.out / "training.csv", training),
        _write(options.out / "loading.csv", loading),
    )


def _training_row(
    name: str,
    batch: int,
    options: ProfileOptions,
    device: torch.device,
    progress: Callable[[str], None],
) -> dict[str, object]:
    features = cached_measure(name, image_size=options.image_size, classes=CLASSES)
    model = build(name).to(device)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01)
    images = torch.randn(batch, 3, options.image_size, options.image_size, device=device)
    labels = torch.randint(0, CLASSES, (batch,), device=device)  # the one cached batch

    def step() -> float:
        started = time.perf_counter()
        optimiser.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(images), labels).backward()  # type: ignore[no-untyped-call]
        optimiser.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - started

    for _ in range(2):  # warm-up: allocator, kernels
        step()
    seconds = statistics.median(step() for _ in range(options.timed_steps))
    progress(f"training {name} batch {batch}: {seconds * 1000:.1f} ms a step")
    return {
        "batch_size": batch,
        "flops": features.flops,
        "model_params": features.model_params,
        "gpus": 1,
        "step_time_s": seconds,
    }


def _loading_row(
    workers: int,
    batch: int,
    options: ProfileOptions,
    progress: Callable[[str], None],
    decoder: str | None,
) -> dict[str, object]:
    dataset = JpegDataset(options.dataset, options.image_size)
    order = EpochOrder(len(dataset))
    batches: Sequence[list[int]] = list(order.batches(0, 1, batch))
    loader: DataLoader[Any]
    pipeline = PIPELINE
    if decoder is None:
        loader = DataLoader(dataset, batch_sampler=batches, num_workers=workers)
    else:
        pipeline = DEVICE_PIPELINE
        on_device = DeviceBatches(
            dataset, endpoint=decoder, job=f"profile-{os.getpid()}", share=1.0, max_batch=batch
        )
        loader = DataLoader(on_device, sampler=batches, batch_size=None, num_workers=workers)
    stream = iter(loader)
    for _ in range(workers):  # every worker has made its first batch
        next(stream)
    started = time.perf_counter()
    timed = 0
    for _ in range(options.timed_batches):
        try:
            next(stream)
        except StopIteration:
            break
        timed += 1
    rate = timed / (time.perf_counter() - started)
    del stream
    progress(f"loading {pipeline} {workers} workers batch {batch}: {rate:.1f} batches/s")
    return {"pipeline": pipeline, "batch_size": batch, "workers": workers, "load_rate": rate}


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    temporary = path.with_suffix(".tmp")
    with temporary.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    temporary.replace(path)
    return path
