"""Event streams against the API (issue 17, finding 9): one tenant opens as many event
streams as it can while another submits jobs, and the submit latency is timed.

Run: .venv/bin/python -m bench.bench_streams [--streams 1500] [--submits 200]
A fresh daemon (simulated agents) per case: no streams, then a flood of `--streams` from
one tenant with the default caps (8 per tenant, 64 on the node: the rest get a 429). Prints
p50/p99 of the other tenant's submits and how many streams were let in, and saves
bench/out/streams.json. About 30 s.
"""

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import save
from bench.daemon_driver import Daemon, free_port

TOKENS = {"admin": "admin-bench-token-0123456789", "flood": "flood-token-0123456789abc",
          "other": "other-token-0123456789abc"}  # fmt: skip
SETTINGS: dict[str, Any] = {"agent_mode": "simulate", "tokens": TOKENS,
                            "node": {"cpu_slots": 4, "cpu_workers": 8}}  # fmt: skip


def flood(url: str, count: int, stop: threading.Event) -> dict[str, int]:
    """Open `count` streams as tenant `flood`, each in a thread that holds it until `stop`;
    the answers' status codes, counted."""
    codes: dict[str, int] = {}
    lock = threading.Lock()

    def hold() -> None:
        headers = {"Authorization": f"Bearer {TOKENS['flood']}"}
        try:
            with (
                httpx.Client(base_url=url, headers=headers, timeout=30) as client,
                client.stream("GET", "/v1/events/stream") as stream,
            ):
                with lock:
                    codes[str(stream.status_code)] = codes.get(str(stream.status_code), 0) + 1
                if stream.status_code == 200:
                    stop.wait()
        except httpx.HTTPError as error:
            with lock:
                codes[type(error).__name__] = codes.get(type(error).__name__, 0) + 1

    threads = [threading.Thread(target=hold, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while sum(codes.values()) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    return codes


def submits(url: str, count: int) -> list[float]:
    """Seconds each of `count` submits of tenant `other` took."""
    headers = {"Authorization": f"Bearer {TOKENS['other']}"}
    body = {"name": "probe", "model": "Resnet18", "batch_size": 64, "gpus": 1, "iterations": 10}
    took = []
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        for _ in range(count):
            start = time.perf_counter()
            client.post("/v1/jobs", json=body).raise_for_status()
            took.append(time.perf_counter() - start)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1500)
    parser.add_argument("--submits", type=int, default=200)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for case, streams in (("no streams", 0), (f"{args.streams} streams tried", args.streams)):
        where = Path(tempfile.mkdtemp(prefix="stoker-streams-"))
        daemon = Daemon(where / "state", free_port(), SETTINGS).start()
        stop = threading.Event()
        try:
            codes = flood(daemon.url, streams, stop) if streams else {}
            took = submits(daemon.url, args.submits)
        finally:
            stop.set()
            daemon.stop()
        quantiles = statistics.quantiles(took, n=100)
        results[case] = {"answers": codes, "p50_s": quantiles[49], "p99_s": quantiles[98]}
        print(f"{case:<22} streams answered {codes or '-'}; submit p50 "
              f"{quantiles[49] * 1000:.1f} ms, p99 {quantiles[98] * 1000:.1f} ms")  # fmt: skip
    print(f"saved {save('streams', {'submits': args.submits, 'cases': results})}")


if __name__ == "__main__":
    main()
