"""The decoder service under load: what each job is served and what the emulator costs the
host (issue 6: within 5 % of share; under 0.2 core per 1,000 samples/s served).

For each capacity and output size: `stoker decoder serve` in a subprocess, two loader
processes (`python -m fpga_driver.loadgen`, shares 0.25 and 0.75) saturating it, and the
samples each was served and the CPU time of the service process over `--seconds`.

Run: .venv/bin/python -m bench.bench_decoder [--seconds S]
Prints a table and saves bench/out/decoder.json.
"""

import argparse
import tempfile
import time
from pathlib import Path

import psutil

from agents.data import make_dataset
from bench.common import save
from fpga_driver.client import DecoderClient
from fpga_driver.loadgen import start_loader, start_service

SHARES = {"a": 0.25, "b": 0.75}
CAPACITIES = (1000.0, 2000.0, 4000.0)
SIZES = (32, 224)  # output side: a CIFAR-like and an ImageNet-like batch to copy


def measure(capacity: float, size: int, seconds: float, scratch: Path) -> dict[str, object]:
    state = scratch / f"service-{capacity:g}-{size}"
    service = start_service(state, capacity)
    endpoint = f"ipc://{state / 'decoder.sock'}"
    loaders = [
        start_loader(endpoint, job, share, scratch / "images", size=size)
        for job, share in SHARES.items()
    ]
    try:
        for loader in loaders:
            assert loader.stdout is not None and loader.stdout.readline()
        with DecoderClient(endpoint, "observer", 0.001, max_batch=1, size=8) as observer:
            time.sleep(1.0)  # images decoded once, queues full
            before, cpu_before, started = (
                observer.stats(),
                _cpu_s(service.pid),
                time.monotonic(),
            )
            time.sleep(seconds)
            after, cpu_after = observer.stats(), _cpu_s(service.pid)
            elapsed = time.monotonic() - started
    finally:
        for loader in loaders:
            loader.kill()
            loader.wait()
            if loader.stdout is not None:
                loader.stdout.close()
        service.terminate()
        service.wait(timeout=10)
    rates = {job: (_served(after, job) - _served(before, job)) / elapsed for job in SHARES}
    total = sum(rates.values())
    cpu_s = cpu_after - cpu_before
    return {
        "capacity": capacity,
        "size": size,
        "seconds": elapsed,
        "clients": [{"share": SHARES[job], "served_per_s": rates[job]} for job in SHARES],
        "device_cpu_s": cpu_s,
        "cores_per_1000_samples_per_s": cpu_s / elapsed / (total / 1000) if total else None,
        "device": str(after["device"]),
    }


def _cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def _served(stats: dict[str, object], job: str) -> int:
    clients = stats["clients"]
    assert isinstance(clients, dict)
    return int(clients[job]["served"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="stoker-bench-decoder-") as scratch:
        make_dataset(Path(scratch) / "images", images=16, size=64)
        for size in SIZES:
            for capacity in CAPACITIES:
                row = measure(capacity, size, args.seconds, Path(scratch))
                rows.append(row)
                clients = row["clients"]
                assert isinstance(clients, list)
                shares = "  ".join(
                    f"share {c['share']:.2f}: {c['served_per_s']:7.1f}/s "
                    f"({c['served_per_s'] / (c['share'] * capacity) - 1:+.1%})"
                    for c in clients
                )
                print(
                    f"capacity {capacity:6.0f}/s, {size:3d} px: {shares}  service CPU "
                    f"{row['device_cpu_s']:.2f} s = {row['cores_per_1000_samples_per_s']:.3f} "
                    "cores per 1,000 samples/s"
                )
    path = save("decoder", {"goal": "within 5 % of share; < 0.2 core per 1000/s", "rows": rows})
    print(f"saved {path}")


if __name__ == "__main__":
    main()
