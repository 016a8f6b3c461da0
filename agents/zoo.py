"""The built-in zoo trainer: a zoo model (agents/models.py) on a folder of JPEGs
(agents/data.py), written on the SDK like any user's script (DESIGN.md, "Jobs: commands
and the SDK"; docs/agents.md).

    python -m agents.zoo --model smResnet20 --dataset DIR --iterations 400 --batch-size 64

The daemon runs a zoo job (one submitted with `model` and no `command`) as a command job of
this script, one process per rank with the environment every command job gets
(docs/sdk.md), so restarts, relaunches, logs and metrics are those of any script. Alone it
is plain PyTorch with checkpoints in ./stoker-out. On top of the SDK it has:

- `--iterations`: that many global steps (`--batch-size` samples each, split among the
  ranks), then the SDK's final checkpoint and `finished`;
- decode mode `device`: when the job's allocation says so (at launch, or at a resume), the
  node's decoder service (`STOKER_DECODER`, `stoker decoder serve`) decodes each batch in
  one command and the loader's workers only augment (`agents.data.DeviceBatches`); a live
  change of the decoder share is passed on to the service at once, with no pause;
- `--audit DIR`: the SDK's sample audit (agents/audit.py) in DIR, as STOKER_AUDIT_DIR
  would have it (the daemon sets that for a job with `audit_samples`);
- a checkpoint of the trainer before this one (`agents.master`) left in the job directory
  is taken over on the first start (agents/legacy.py).
"""

import argparse
import logging
import math
import os
import sys
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset

import stoker
from agents import legacy
from agents.data import DeviceBatches, EpochOrder, JpegDataset
from agents.datafiles import DataError
from agents.models import build
from fpga_driver.client import DecoderClient

log = logging.getLogger(__name__)

# A device-mode job the plan gave no share still decodes, slowly (shares must be > 0).
MIN_SHARE = 0.001


class ZooSamples(Dataset[tuple[torch.Tensor, int]]):
    """A `JpegDataset`'s samples, decoded by Pillow in the loader's workers, or, while
    `device` is set, a whole batch at a time by the decoder service (DataLoader hands a
    worker the batch's indices through `__getitems__`). Cheap to pickle either way."""

    def __init__(self, images: JpegDataset) -> None:
        self.images = images
        self.device: DeviceBatches | None = None

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.images[index]

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, int]]:
        if self.device is None:
            return [self.images[index] for index in indices]
        return self.device.samples(indices)


class Decoding:
    """Where the job decodes, following its allocation: the CPU, or the decoder device at
    its share. Rank 0 keeps a connection of its own to set the share live."""

    def __init__(self, job: stoker.Job, samples: ZooSamples, max_batch: int) -> None:
        self.job, self.samples, self.max_batch = job, samples, max_batch
        self.name = job.environment.job_id or "zoo"
        self.endpoint = job.environment.decoder_endpoint
        self._control: DecoderClient | None = None

    def follow(self, allocation: stoker.Allocation) -> None:
        """The job's allocation now (at start, after a resume, on a live share change)."""
        share = max(allocation.decoder_share, MIN_SHARE)
        if allocation.decode_mode == "cpu":
            self.samples.device = None
            return  # the share takes effect when the job next decodes on the device
        if self.endpoint is None:
            raise DataError("decode mode device needs the decoder service (STOKER_DECODER)")
        if self.job.rank == 0:  # before the next loader's workers connect
            if self._control is None:
                self._control = DecoderClient(
                    self.endpoint, self.name, share, max_batch=1, size=1, blocks=1
                )
            self._control.set_share(share)
            log.info("job %s: decoder share %.3f", self.name, share)
        if self.samples.device is None:  # workers join at the job's share, whatever this says
            self.samples.device = DeviceBatches(
                self.samples.images,
                endpoint=self.endpoint,
                job=self.name,
                share=share,
                max_batch=self.max_batch,
            )

    def close(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None


def train(job: stoker.Job, args: argparse.Namespace) -> None:
    """Train to `args.iterations` steps, or until the daemon stops the job."""
    torch.manual_seed(args.seed)  # every rank starts from the same weights
    images = JpegDataset(args.dataset, args.image_size, seed=args.seed)
    if images.read_latency_s > 0.0:
        log.info(
            "%s emulates a remote store: every image read waits %.0f ms first",
            args.dataset,
            images.read_latency_s * 1000,
        )
    per_rank = args.batch_size // job.world_size
    if per_rank < 1:
        raise DataError(f"--batch-size {args.batch_size} is less than one per rank")
    samples = ZooSamples(images)
    network = build(args.model, classes=images.classes).to(job.device)
    model = DistributedDataParallel(network) if job.world_size > 1 else network
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loader = job.loader(
        samples,
        batch_size=per_rank,
        seed=args.seed,
        num_workers=args.workers,
        pin_memory=job.device.type == "cuda",
    )
    job.track(model=network, optimizer=optimizer)
    decoding = Decoding(job, samples, max_batch=per_rank + 1)  # a merged tail adds one
    decoding.follow(job.allocation)
    job.on_allocation(decoding.follow)
    order = EpochOrder(len(samples))  # how many global steps an epoch has
    global_batches = len(order.global_batches(per_rank * job.world_size, job.world_size))
    try:
        for epoch in job.epochs(math.ceil(args.iterations / global_batches)):
            images.epoch = epoch  # the augmentation's draws depend on it
            for pixels, labels in loader:
                loss = step(model, optimizer, pixels, labels, job.device)
                job.report(loss=loss)
                if job.step >= args.iterations:
                    break
    finally:
        decoding.close()


def step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    pixels: torch.Tensor,
    labels: torch.Tensor,
    device: torch.device,
) -> torch.Tensor:
    """Forward, backward, update, synchronised (the SDK times it as the step); the loss."""
    pixels = pixels.to(device, non_blocking=True)
    labels = labels.to(device, non_blocking=True)
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(pixels), labels)
    loss.backward()  # type: ignore[no-untyped-call]
    optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return loss.detach()


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a zoo model, e.g. smResnet20")
    parser.add_argument("--dataset", type=Path, required=True, help="`stoker dataset make`'s")
    parser.add_argument("--iterations", type=int, required=True, help="global steps")
    parser.add_argument("--batch-size", type=int, required=True, help="global batch")
    parser.add_argument("--image-size", type=int, default=None, help="[the dataset's]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--workers", type=int, default=2, help="loader workers, alone")
    parser.add_argument("--audit", type=Path, default=None, help="a folder for the audit")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.audit is not None:
        os.environ["STOKER_AUDIT_DIR"] = str(args.audit)
    legacy.take_over(
        stoker.JobEnvironment.read(os.environ),
        seed=args.seed,
        batch_size=args.batch_size,
        samples=len(JpegDataset(args.dataset, args.image_size)),
    )
    train(stoker.init(), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
