"""What the decoder service serves each job and what it costs the host, measured from
outside the service, for benches and tests.

`measure_service` watches a running service: the samples it served each job (from its
`stats`, through an observer connection) and the CPU time of its process (user + system,
from the kernel's accounting through psutil). `measure_saturated` runs the whole setup:
`stoker decoder serve` plus one saturating loader process per job, then measures it.
"""

import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from fpga_driver.client import DecoderClient
from fpga_driver.loadgen import start_loader, start_service, stop_service


@dataclass(frozen=True)
class ServiceLoad:
    """One measurement window of a decoder service."""

    seconds: float  # the window, wall clock
    served_per_s: dict[str, float]  # samples per second, per job
    service_cpu_s: float  # CPU the service process used in the window (all its threads)
    device: str  # what the service says its device is ("EMULATED ..." for the emulator)

    @property
    def cores_per_1000_samples_per_s(self) -> float | None:
        """Host cores the service used per 1,000 samples/s served; None if none served."""
        total = sum(self.served_per_s.values())
        return self.service_cpu_s / self.seconds / (total / 1000) if total else None

    def contract(self, capacity: float, shares: Mapping[str, float]) -> dict[str, object]:
        """The `stoker decoder bench` JSON shape, one client per job of `shares`."""
        return {
            "capacity": capacity,
            "seconds": self.seconds,
            "clients": [
                {"job": job, "share": share, "served_per_s": self.served_per_s[job]}
                for job, share in shares.items()
            ],
            "device_cpu_s": self.service_cpu_s,
            "cores_per_1000_samples_per_s": self.cores_per_1000_samples_per_s,
            "device": self.device,
        }


def process_cpu_s(pid: int) -> float:
    """User plus system CPU seconds process `pid` has used so far (all its threads)."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def measure_service(
    endpoint: str, service_pid: int, jobs: Sequence[str], seconds: float, *, warm_s: float = 1.0
) -> ServiceLoad:
    """After `warm_s` (images decoded once, queues full), what the service at `endpoint`
    (process `service_pid`) served each of `jobs` per second over `seconds`, and its CPU.
    The observer connection is one more client, with a tiny share it never uses."""
    with DecoderClient(endpoint, "stoker-observer", 0.001, max_batch=1, size=1) as observer:
        time.sleep(warm_s)
        before, cpu_before, started = observer.stats(), process_cpu_s(service_pid), time.monotonic()
        time.sleep(seconds)
        after, cpu_after = observer.stats(), process_cpu_s(service_pid)
        elapsed = time.monotonic() - started
    rates = {job: (_served(after, job) - _served(before, job)) / elapsed for job in jobs}
    return ServiceLoad(elapsed, rates, cpu_after - cpu_before, str(after.get("device")))


def measure_saturated(
    capacity: float,
    shares: Mapping[str, float],
    seconds: float,
    images: Path,
    *,
    batch: int = 16,
    size: int = 32,
    warm_s: float = 1.0,
) -> ServiceLoad:
    """Start `stoker decoder serve --capacity capacity` and one saturating loader process
    per job of `shares` (each decoding `batch` JPEGs of `images` to `size` px over and
    over), measure them, and stop everything. RuntimeError if the service does not stop
    cleanly (exit status 0, every block unlinked is its promise)."""
    with tempfile.TemporaryDirectory(prefix="stoker-decoder-") as state:
        service = start_service(Path(state), capacity)
        endpoint = f"ipc://{Path(state) / 'decoder.sock'}"
        loaders = [
            start_loader(endpoint, job, share, images, batch=batch, size=size)
            for job, share in shares.items()
        ]
        try:
            for loader in loaders:
                assert loader.stdout is not None
                if not loader.stdout.readline():
                    raise RuntimeError(f"a loader did not register: exit {loader.wait()}")
            load = measure_service(endpoint, service.pid, list(shares), seconds, warm_s=warm_s)
        finally:
            for loader in loaders:
                loader.kill()
                loader.wait()
                if loader.stdout is not None:
                    loader.stdout.close()
            stop_service(service)
        if service.returncode != 0:
            raise RuntimeError(f"the decoder service exited {service.returncode}")
    return load


def _served(stats: dict[str, object], job: str) -> int:
    clients = stats["clients"]
    assert isinstance(clients, dict)
    return int(clients[job]["served"]) if job in clients else 0
