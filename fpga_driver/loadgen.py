"""A loader that keeps the decoder busy for one job, for benches and tests.

`python -m fpga_driver.loadgen ENDPOINT JOB SHARE IMAGES [--batch 16 --size 32]` registers
`JOB` with `SHARE`, prints its block names on one line, then decodes the first `--batch`
JPEGs of IMAGES over and over through a `Reader` (4 commands in flight) until killed.
`start_service` and `start_loader` run `stoker decoder serve` and this loader as
subprocesses.
"""

import argparse
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from fpga_driver.client import DecoderClient, Reader


def start_service(state_dir: Path, capacity: float) -> "subprocess.Popen[bytes]":
    """Start `stoker decoder serve` (its log in state_dir/decoder.log) and wait for it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    log = state_dir / "decoder.log"
    with log.open("wb") as output:
        service = subprocess.Popen(
            [sys.executable, "-m", "cli", "decoder", "serve",
             "--state-dir", str(state_dir), "--capacity", str(capacity)],
            stderr=output,
        )  # fmt: skip
    deadline = time.monotonic() + 30
    while b"serving on" not in log.read_bytes():
        if service.poll() is not None or time.monotonic() > deadline:
            service.kill()
            service.wait()
            raise RuntimeError(f"decoder service did not start: {log.read_text()}")
        time.sleep(0.05)
    return service


def stop_service(service: "subprocess.Popen[bytes]") -> None:
    """SIGTERM, as an operator's Ctrl-C: the service unlinks its blocks and exits 0. One
    that does not stop within 10 s is killed (and exits -9, which callers can check)."""
    service.terminate()
    try:
        service.wait(timeout=10)
    except subprocess.TimeoutExpired:
        service.kill()
        service.wait()


def start_loader(
    endpoint: str, job: str, share: float, images: Path, *, batch: int = 16, size: int = 32
) -> "subprocess.Popen[str]":
    """A loader process saturating the device for `job`; its first line is its blocks."""
    process = subprocess.Popen(
        [sys.executable, "-m", "fpga_driver.loadgen", endpoint, job, str(share), str(images),
         "--batch", str(batch), "--size", str(size)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    return process


def _batches(images: Path, batch: int) -> Iterator[list[Path]]:
    paths = sorted(images.glob("*.jpg"))[:batch]
    while True:
        yield paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("endpoint")
    parser.add_argument("job")
    parser.add_argument("share", type=float)
    parser.add_argument("images", type=Path)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=32)
    args = parser.parse_args()
    client = DecoderClient(
        args.endpoint, args.job, args.share, max_batch=args.batch, size=args.size
    )
    with client:
        print(" ".join(block.name for block in client.blocks.blocks), flush=True)
        for batch in Reader(client, _batches(args.images, args.batch), depth=4):
            batch.release()


if __name__ == "__main__":
    main()
