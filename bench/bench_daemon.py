"""The daemon's two service figures: submissions per second with durable writes, and the
pause-to-paused round trip over ZeroMQ.

Run: .venv/bin/python -m bench.bench_daemon [--submits N] [--clients K] [--round-trips N]
Prints both tables and saves bench/out/daemon.json. Goals (issue 4): at least 500
submits/s with p99 under 20 ms; the pause round trip p99 under 2 ms.

- Submits: a real `stoker serve` (SQLite in WAL with synchronous=FULL: every reply waits
  for its fsync) with a one-hour arrival window, so no agent starts and the figure is the
  REST-to-disk path. K client threads each send N/K POST /v1/jobs over keep-alive.
- Round trip: the daemon's own AgentLink (ROUTER on zmq.asyncio, ipc) sends `pause` and
  waits for `paused` from an agent process that answers at once (no checkpoint), the
  protocol's pydantic encode and decode included on both ends.
"""

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import zmq

from agents.protocol import PausedMessage, PauseMessage, decode_daemon, encode
from bench.common import save
from bench.daemon_driver import Daemon, free_port
from daemon.agentlink import AgentLink

JOB = {"model": "Resnet18", "batch_size": 64, "gpus": 1, "iterations": 1000}


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def bench_submits(submits: int, clients: int, state_dir: Path) -> dict[str, float]:
    settings = {
        "agent_mode": "simulate",  # no agent starts within the window anyway
        "scheduler": {"arrival_window_s": 3600.0},
        "node": {"cpu_slots": 4},
    }
    daemon = Daemon(state_dir, free_port(), settings).start()
    latencies: list[float] = []
    lock = threading.Lock()

    def client(index: int) -> None:
        mine: list[float] = []
        with daemon.client() as http:
            for n in range(submits // clients):
                started = time.perf_counter()
                reply = http.post("/v1/jobs", json={"name": f"c{index}-{n}", **JOB})
                mine.append(time.perf_counter() - started)
                assert reply.status_code == 201, reply.text
        with lock:
            latencies.extend(mine)

    with daemon.client() as http:  # warm-up: imports, first SQLite pages
        for n in range(20):
            http.post("/v1/jobs", json={"name": f"warm-{n}", **JOB})
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    with daemon.client() as http:
        stored = len(http.get("/v1/jobs", params={"limit": 5000}).json())
    daemon.stop()
    return {
        "submits": float(len(latencies)),
        "clients": float(clients),
        "stored": float(stored),
        "submits_per_s": len(latencies) / elapsed,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * percentile(latencies, 0.99),
        "max_ms": 1000 * max(latencies),
    }


def echo_agent(endpoint: str) -> None:
    """`python -m bench.bench_daemon --agent ENDPOINT`: answer every pause at once."""
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.IDENTITY, b"bench")
    socket.connect(endpoint)
    socket.send(b'{"type": "hello", "job": "bench", "pid": 1}')
    while True:
        message = decode_daemon(socket.recv())
        if not isinstance(message, PauseMessage):
            break
        socket.send(encode(PausedMessage(job="bench", gen=message.gen, iteration=0)))
    socket.close()
    context.term()


async def round_trips(link: AgentLink, count: int) -> list[float]:
    replies: asyncio.Queue[object] = asyncio.Queue()

    async def deliver(message: object) -> None:
        await replies.put(message)

    receiver = asyncio.create_task(link.serve(deliver))
    await replies.get()  # the agent's hello
    timings = []
    for gen in range(1, count + 1):
        started = time.perf_counter()
        assert await link.send(PauseMessage(job="bench", gen=gen))
        reply = await replies.get()
        timings.append(time.perf_counter() - started)
        assert isinstance(reply, PausedMessage) and reply.gen == gen
    receiver.cancel()
    return timings


def bench_round_trip(count: int, state_dir: Path) -> dict[str, float]:
    state_dir.mkdir(parents=True, exist_ok=True)
    link = AgentLink(state_dir / "agents.sock")
    link.bind()
    agent = subprocess.Popen([sys.executable, "-m", "bench.bench_daemon", "--agent", link.endpoint])
    try:
        timings = asyncio.run(round_trips(link, count + 100))[100:]  # first 100: warm-up
    finally:
        agent.kill()
        agent.wait()
        link.close()
    return {
        "round_trips": float(len(timings)),
        "p50_ms": 1000 * statistics.median(timings),
        "p99_ms": 1000 * percentile(timings, 0.99),
        "max_ms": 1000 * max(timings),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--submits", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--round-trips", type=int, default=2000)
    parser.add_argument("--agent", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.agent:
        echo_agent(args.agent)
        return
    with tempfile.TemporaryDirectory(prefix="stoker-bench-") as scratch:
        submits = bench_submits(args.submits, args.clients, Path(scratch) / "daemon")
        trips = bench_round_trip(args.round_trips, Path(scratch) / "link")
    print("submits with durable writes (goal >= 500/s, p99 < 20 ms)")
    print(
        f"  {submits['submits']:.0f} submits from {submits['clients']:.0f} clients: "
        f"{submits['submits_per_s']:.0f}/s, p50 {submits['p50_ms']:.2f} ms, "
        f"p99 {submits['p99_ms']:.2f} ms, max {submits['max_ms']:.1f} ms "
        f"({submits['stored']:.0f} jobs stored)"
    )
    print("pause -> paused over ZeroMQ, no checkpoint (goal p99 < 2 ms)")
    print(
        f"  {trips['round_trips']:.0f} round trips: p50 {trips['p50_ms']:.3f} ms, "
        f"p99 {trips['p99_ms']:.3f} ms, max {trips['max_ms']:.2f} ms"
    )
    print(f"saved {save('daemon', {'submits': submits, 'round_trip': trips})}")


if __name__ == "__main__":
    main()
