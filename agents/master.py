"""The application master: one process per job that trains a zoo model with PyTorch and
obeys the daemon (DESIGN.md, "Application master"; paper Sec. III-C 4).

`python -m agents.master --job ID --endpoint ipc://... --model Resnet18 --dataset DIR ...`

- One rank per GPU with torch.distributed (NCCL on GPUs, gloo on CPU, where `--gpus` counts
  CPU training ranks); rank 0 talks to the daemon over a ZeroMQ DEALER.
- Each rank reads its share of every global batch (`agents.data.EpochOrder`) through a
  DataLoader with `workers` processes (pinned memory on GPU), and splits each iteration
  into idle (waiting for the batch) and step (forward, backward, update, synchronised).
- After every iteration rank 0 broadcasts what the daemon asked: go on, pause or cancel,
  so all ranks stop at the same iteration. On pause rank 0 writes the checkpoint (model,
  optimiser, epoch, cursor, iteration, RNG states, audit offsets) to a temp file, fsyncs
  and renames it, says `paused`, and waits; on `resume` every rank rebuilds its DataLoader
  from the cursor with the new worker count (hot resize: process and model stay). The
  `resumed` message goes out after the first new step, with the measured gap.
- Decode mode `device` (`--decode-mode`, or a `resume` that says so): the node's decoder
  service (`--decoder-endpoint`, `stoker decoder serve`) decodes each batch in one command
  and the DataLoader workers only augment (`agents.data.DeviceBatches`), with the job's
  decoder share; a `share` message from the daemon changes it live, without a pause.
- `--resume-from CHECKPOINT` starts cold from a checkpoint (after a crash or a kill).
- `--audit`: each rank appends `epoch index` for every sample it trains to
  `audit/rank<k>.txt`; a cold start truncates the files to the checkpoint's offsets, so the
  audit rolls back with the model and every sample of an epoch is counted once.
"""

import datetime
import logging
import os
import random
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.multiprocessing.spawn import spawn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from agents.data import DataError, DeviceBatches, EpochOrder, JpegDataset
from agents.link import AgentJob, DaemonLink, agent_arguments
from agents.models import build
from agents.protocol import (
    AgentState,
    CancelMessage,
    FinishedMessage,
    HeartbeatMessage,
    Hello,
    PausedMessage,
    PauseMessage,
    ResumedMessage,
    write_finished_marker,
)
from fpga_driver.client import DecoderClient

log = logging.getLogger(__name__)

# A device-mode job the plan gave no share still decodes, slowly (shares must be > 0).
MIN_SHARE = 0.001

GO, PAUSE, CANCEL = 0, 1, 2


@dataclass(frozen=True, kw_only=True)
class MasterJob(AgentJob):
    model: str
    dataset: Path
    image_size: int = 32
    seed: int = 0
    lr: float = 0.05
    audit: bool = False
    rendezvous_port: int = 0
    master_pid: int = 0  # the process the daemon launched (ranks may be its children)
    cold_resize: bool = False  # on pause: checkpoint, say paused, exit; the daemon relaunches
    paused_at: float | None = None  # started by a cold resume: when the pause came (epoch s)


@dataclass
class _Meter:
    """Idle and step seconds since the last heartbeat."""

    started: float
    idle_s: float = 0.0
    step_s: float = 0.0
    samples: int = 0


class Trainer:
    """One rank's training loop."""

    def __init__(self, job: MasterJob, rank: int) -> None:
        self.job, self.rank, self.world = job, rank, job.gpus
        self.device = _device(rank)
        torch.manual_seed(job.seed)
        self.dataset = JpegDataset(job.dataset, job.image_size, seed=job.seed)
        if len(self.dataset) < self.world:
            raise DataError(f"{job.dataset} has {len(self.dataset)} images for {self.world} ranks")
        model = build(job.model, classes=self.dataset.classes).to(self.device)
        self.model: torch.nn.Module = DistributedDataParallel(model) if self.world > 1 else model
        self.optimiser = torch.optim.SGD(self.model.parameters(), lr=job.lr, momentum=0.9)
        self.order = EpochOrder(len(self.dataset), seed=job.seed)
        self.iteration = 0
        self.workers = job.workers_per_gpu
        self.decode_mode, self.share = job.decode_mode, job.decoder_share
        if self.decode_mode == "device" and not job.decoder_endpoint:
            raise DataError("decode mode device needs --decoder-endpoint (`stoker decoder serve`)")
        self._control: DecoderClient | None = None  # rank 0's line for live share changes
        self.audit = self._audit_file()
        if job.resume_from is not None:
            self._load(job.resume_from)
        self.daemon = DaemonLink(job.job_id, job.endpoint) if rank == 0 else None
        self.gen = job.gen

    # ---- the loop ------------------------------------------------------------------------

    def run(self) -> int:
        if self.daemon is not None:
            self._hello("running")
        meter = _Meter(time.monotonic())
        # A cold resume says `resumed` after its first step, like a hot one (wall clock,
        # since the pause happened in the process before this one).
        paused_at = self.job.paused_at
        while self.iteration < self.job.iterations:
            self.dataset.epoch = self.order.epoch
            epoch = self.order.epoch
            for images, labels, indices, global_size in self._loader():
                waited = time.monotonic()
                self._step(images, labels)
                done = time.monotonic()
                meter.idle_s += waited - meter.started
                meter.step_s += done - waited
                self._account(indices, global_size)
                meter.samples += self.job.batch_size
                if paused_at is not None and self.daemon is not None:
                    self._resumed(paused_at)
                    paused_at = None
                decision = self._decide()
                if decision == CANCEL:
                    return self._end(cancelled=True)
                if decision == PAUSE:
                    paused_at = time.time()
                    if not self._pause():
                        return self._end(cancelled=True)
                    meter = _Meter(time.monotonic())
                    break  # rebuild the loader with the new worker count
                if self.iteration >= self.job.iterations or self.order.epoch != epoch:
                    break
                meter = self._heartbeat(meter)
                meter.started = time.monotonic()
        return self._end(cancelled=False)

    def _loader(self) -> Any:
        """This rank's batches from the cursor on, with their sample indices and the size of
        the global batch each belongs to."""
        batches = self.order.global_batches(self.job.batch_size, self.world)
        shares = list(self.order.batches(self.rank, self.world, self.job.batch_size))
        loader: DataLoader[Any]
        if self.decode_mode == "device":  # the decoder service decodes, workers augment
            device_batches = DeviceBatches(
                self.dataset,
                endpoint=self.job.decoder_endpoint,
                job=self.job.job_id,
                share=max(self.share, MIN_SHARE),
                max_batch=max((len(share) for share in shares), default=1),
            )
            loader = DataLoader(
                device_batches,
                sampler=shares,
                batch_size=None,
                num_workers=self.workers,
                pin_memory=self.device.type == "cuda",
            )
        else:
            loader = DataLoader(
                self.dataset,
                batch_sampler=shares,
                num_workers=self.workers,
                pin_memory=self.device.type == "cuda",
            )
        return (
            (images, labels, share, len(batch))
            for (images, labels), share, batch in zip(loader, shares, batches, strict=False)
        )

    def _step(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        images = images.to(self.device, non_blocking=True)
        labels = labels.to(self.device, non_blocking=True)
        self.optimiser.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(self.model(images), labels)
        loss.backward()  # type: ignore[no-untyped-call]
        self.optimiser.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _account(self, indices: list[int], global_size: int) -> None:
        if self.audit is not None:
            self.audit.write("".join(f"{self.order.epoch} {index}\n" for index in indices))
            self.audit.flush()
        self.order.advance(global_size)
        self.iteration += 1

    def _decide(self) -> int:
        """Every rank learns what rank 0 heard from the daemon, at the same iteration."""
        decision = GO
        if self.daemon is not None:
            if self.daemon.reconnected():
                self._hello("running")
            stop = self.daemon.next_stop()
            self._apply_share(self.daemon.take_share())
            if isinstance(stop, PauseMessage):
                decision, self.gen = PAUSE, stop.gen
            elif isinstance(stop, CancelMessage):
                decision = CANCEL
        if self.world == 1:
            return decision
        flag = torch.tensor([decision], dtype=torch.int64)
        dist.broadcast(flag, src=0)
        return int(flag.item())

    def _apply_share(self, share: float | None) -> None:
        """A live share from the daemon: the service applies it to the job's next command."""
        if share is None or share == self.share:
            return
        self.share = share
        log.info("job %s: decoder share %.3f, live", self.job.job_id, share)
        self._tell_decoder()

    def _tell_decoder(self) -> None:
        """Rank 0 sets the job's share on the decoder service, over its own connection. The
        share is the job's: DataLoader workers that connect later join at it."""
        if self.decode_mode != "device" or self.rank != 0:
            return  # on the CPU, the share takes effect when the job next decodes on the device
        if self._control is None:
            self._control = DecoderClient(
                self.job.decoder_endpoint, self.job.job_id, max(self.share, MIN_SHARE),
                max_batch=1, size=1, blocks=1,
            )  # fmt: skip
        self._control.set_share(max(self.share, MIN_SHARE))

    # ---- pause, checkpoint, resume ---------------------------------------------------------

    def _pause(self) -> bool:
        """Checkpoint, say paused, wait for resume; False when cancelled meanwhile."""
        offsets = self._audit_offsets()
        path = self.job.checkpoint_dir / "checkpoint.pt"
        if self.rank == 0:
            self._save(path, offsets)
        # What rank 0 heard: workers (0: cancelled), device mode (1) or not, the share.
        resume_to = torch.tensor([0.0, 0.0, 0.0], dtype=torch.float64)
        if self.daemon is not None:
            self.daemon.send(
                PausedMessage(
                    job=self.job.job_id,
                    gen=self.gen,
                    iteration=self.iteration,
                    checkpoint=str(path),
                )
            )
            if self.job.cold_resize:
                log.info("job %s: cold resize: exiting after the checkpoint", self.job.job_id)
                resume = None
            else:
                resume = self.daemon.wait_for_resume()
            if resume is not None:
                self.gen = resume.gen
                resume_to[0] = resume.workers_per_gpu
                resume_to[1] = 1.0 if resume.decode_mode == "device" else 0.0
                resume_to[2] = resume.decoder_share
        if self.world > 1:
            dist.broadcast(resume_to, src=0)
        if int(resume_to[0].item()) == 0:
            return False
        self.workers = int(resume_to[0].item())
        self.decode_mode = "device" if resume_to[1].item() > 0.5 else "cpu"
        self.share = float(resume_to[2].item())
        self._tell_decoder()  # before the new loader's workers connect
        return True

    def _resumed(self, paused_at: float) -> None:
        assert self.daemon is not None
        self.daemon.send(
            ResumedMessage(
                job=self.job.job_id,
                gen=self.gen,
                workers=self.workers,
                share=self.share,
                gap_s=max(0.0, time.time() - paused_at),
            )
        )

    def _save(self, path: Path, audit_offsets: list[int]) -> None:
        model = self.model.module if isinstance(self.model, DistributedDataParallel) else self.model
        state = {
            "job": self.job.job_id,
            "model": model.state_dict(),
            "optimiser": self.optimiser.state_dict(),
            "epoch": self.order.epoch,
            "cursor": self.order.cursor,
            "iteration": self.iteration,
            "rng": {
                "torch": torch.get_rng_state(),
                "numpy": np.random.get_state(),
                "python": random.getstate(),
            },
            "audit_offsets": audit_offsets,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        with temporary.open("wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        temporary.replace(path)

    def _load(self, path: Path) -> None:
        state = torch.load(path, map_location=self.device, weights_only=False)
        model = self.model.module if isinstance(self.model, DistributedDataParallel) else self.model
        model.load_state_dict(state["model"])
        self.optimiser.load_state_dict(state["optimiser"])
        self.order.epoch, self.order.cursor = state["epoch"], state["cursor"]
        self.iteration = state["iteration"]
        torch.set_rng_state(state["rng"]["torch"])
        np.random.set_state(state["rng"]["numpy"])
        random.setstate(state["rng"]["python"])
        if self.audit is not None:  # the audit rolls back with the model
            self.audit.truncate(state["audit_offsets"][self.rank])
            self.audit.seek(0, os.SEEK_END)

    # ---- audit, messages, the end --------------------------------------------------------

    def _audit_file(self) -> Any:
        if not self.job.audit:
            return None
        directory = self.job.checkpoint_dir / "audit"
        directory.mkdir(parents=True, exist_ok=True)
        return (directory / f"rank{self.rank}.txt").open("a+")

    def _audit_offsets(self) -> list[int]:
        """Every rank's audit length, synced to disk, gathered on all ranks."""
        mine = 0
        if self.audit is not None:
            self.audit.flush()
            os.fsync(self.audit.fileno())
            mine = self.audit.tell()
        if self.world == 1:
            return [mine]
        gathered = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world)]
        dist.all_gather(gathered, torch.tensor([mine], dtype=torch.int64))
        return [int(t.item()) for t in gathered]

    def _hello(self, state: AgentState) -> None:
        assert self.daemon is not None
        self.daemon.send(
            Hello(
                job=self.job.job_id,
                gen=self.gen,
                pid=self.job.master_pid or os.getpid(),
                state=state,
                iteration=self.iteration,
                workers=self.workers,
                share=self.share,
            )
        )

    def _heartbeat(self, meter: _Meter) -> _Meter:
        if self.daemon is None or meter.idle_s + meter.step_s < self.job.heartbeat_s:
            return meter
        busy = meter.idle_s + meter.step_s
        self.daemon.send(
            HeartbeatMessage(
                job=self.job.job_id,
                gen=self.gen,
                iteration=self.iteration,
                samples=self.iteration * self.job.batch_size,
                idle_s=meter.idle_s,
                step_s=meter.step_s,
                samples_per_s=meter.samples / busy if busy > 0 else 0.0,
                workers=self.workers,
                share=self.share,
            )
        )
        return _Meter(time.monotonic())

    def _end(self, *, cancelled: bool) -> int:
        if self.audit is not None:
            self.audit.close()
        if self._control is not None:
            self._control.close()
        if self.daemon is not None:
            if not cancelled:
                write_finished_marker(self.job.checkpoint_dir, self.iteration)
                self.daemon.send(
                    FinishedMessage(job=self.job.job_id, gen=self.gen, iteration=self.iteration)
                )
            self.daemon.close()
        return 0


def _device(rank: int) -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", rank % torch.cuda.device_count())
    return torch.device("cpu")


def _rank(rank: int, job: MasterJob) -> None:
    """One rank's process (rank 0 is the master's own process)."""
    if job.gpus > 1:
        dist.init_process_group(
            "nccl" if torch.cuda.is_available() else "gloo",
            init_method=f"tcp://127.0.0.1:{job.rendezvous_port}",
            rank=rank,
            world_size=job.gpus,
            timeout=datetime.timedelta(hours=1),  # a pause may last long
        )
    torch.set_num_threads(1)
    try:
        Trainer(job, rank).run()
    finally:
        if job.gpus > 1:
            dist.destroy_process_group()


def run(job: MasterJob) -> int:
    """Train `job` to its end, or until cancelled; the exit code."""
    job = replace(job, master_pid=os.getpid())
    if job.gpus == 1:
        _rank(0, job)
        return 0
    job = replace(job, rendezvous_port=job.rendezvous_port or _free_port())
    spawn(_rank, args=(job,), nprocs=job.gpus, join=True)  # type: ignore[no-untyped-call]
    return 0


def _free_port() -> int:
    import socket  # noqa: PLC0415 (only the multi-rank path needs it)

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def main(argv: list[str] | None = None) -> int:
    parser = agent_arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--audit", action="store_true")
    parser.add_argument("--cold-resize", action="store_true")
    parser.add_argument("--paused-at", type=float, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    job = MasterJob(
        **AgentJob.options(args),
        model=args.model,
        dataset=args.dataset,
        image_size=args.image_size,
        seed=args.seed,
        lr=args.lr,
        audit=args.audit,
        cold_resize=args.cold_resize,
        paused_at=args.paused_at,
    )
    return run(job)


if __name__ == "__main__":
    sys.exit(main())
