"""Slow clients against the API (issue 37, finding 2): one client opens as many
connections as its open-file limit allows, each sending a request line and one header and
then nothing, and keeps opening them while another tenant's authenticated GETs are timed.

Run: .venv/bin/python -m bench.bench_slow_clients [--connections N] [--requests 300]
A fresh daemon (simulated agents) with the default `[limits]` but a 2 s header timeout.
N defaults to this process's open-file limit less 500 (at least 2,000). Prints the other
tenant's p50/p99, how many half-open connections were made and how many the daemon had
closed when the flood stopped, how long the last ones took to be closed, and the
daemon's open descriptors at their peak; saves bench/out/slow_clients.json. About 30 s.
"""

import argparse
import multiprocessing
import os
import resource
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import save
from bench.daemon_driver import Daemon, free_port

TOKENS = {"admin": "admin-bench-token-0123456789", "other": "other-token-0123456789abc"}
NOBODY = 65534  # the flood's user, when this runs as root
HALF_HEAD = b"GET /healthz HTTP/1.1\r\nHost: stoker\r\n"  # no blank line: never finished


class SlowClient:
    """Half-open connections to 127.0.0.1:`port`, `count` at most at once, opened by a
    process of their own (not to share the timed client's interpreter): those the daemon
    closes are opened again until `stop`, which then waits for the daemon to close the
    rest and says how long that took."""

    def __init__(
        self, port: int, count: int, *, reopen: bool = False, user: int | None = None
    ) -> None:
        self.port, self.count, self.reopen, self.user = port, count, reopen, user
        self.opened = multiprocessing.Value("q", 0)
        self.failed = multiprocessing.Value("q", 0)
        self.closed_by_daemon = multiprocessing.Value("q", 0)
        self._stop = multiprocessing.Event()
        self._wait_s = multiprocessing.Value("d", 60.0)
        self._report: multiprocessing.SimpleQueue[dict[str, Any]] = multiprocessing.SimpleQueue()
        self._process = multiprocessing.get_context("fork").Process(target=self._run)

    def start(self) -> "SlowClient":
        self._process.start()
        return self

    def stop(self, wait_s: float = 60.0) -> dict[str, Any]:
        """Stop opening; once the daemon closed every held connection (or `wait_s` passed),
        how many were held, how long their closing took and how many stayed open."""
        self._wait_s.value = wait_s
        self._stop.set()
        report = self._report.get()
        self._process.join(timeout=wait_s + 30)
        report["wait_s"] = wait_s
        return report

    def _run(self) -> None:
        if self.user is not None:
            os.setuid(self.user)  # another local user than the tenant timed
        held: list[socket.socket] = []
        while not self._stop.is_set():
            while not self._stop.is_set() and (
                len(held) < self.count if self.reopen else self.opened.value < self.count
            ):
                opened = self._open_one()
                if opened is not None:
                    held.append(opened)
            held = [one for one in held if not self._gone(one)]
            time.sleep(0.05)
        stopped = time.monotonic()
        at_stop = len(held)
        while held and time.monotonic() - stopped < self._wait_s.value:
            held = [one for one in held if not self._gone(one)]
            time.sleep(0.05)
        self._report.put({"held_at_stop": at_stop, "last_closed_after_s":
                          time.monotonic() - stopped, "still_open": len(held)})  # fmt: skip
        for one in held:
            one.close()

    def _open_one(self) -> socket.socket | None:
        try:
            opened = socket.socket()
            opened.settimeout(5)
            opened.connect(("127.0.0.1", self.port))
            opened.sendall(HALF_HEAD)
            opened.settimeout(None)  # blocking: `closed` peeks without waiting
        except OSError:
            with self.failed.get_lock():
                self.failed.value += 1
            time.sleep(0.01)
            return None
        with self.opened.get_lock():
            self.opened.value += 1
        return opened

    def _gone(self, held: socket.socket) -> bool:
        if not closed(held):
            return False
        held.close()
        with self.closed_by_daemon.get_lock():
            self.closed_by_daemon.value += 1
        return True


def closed(held: socket.socket) -> bool:
    """Whether the other end closed or reset `held` (it never answers a half request)."""
    try:
        return held.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:  # nothing to read: still open
        return False
    except OSError:  # reset: aborted
        return True


def timed_gets(url: str, token: str, count: int, path: str = "/v1/jobs") -> list[float]:
    """Seconds each of `count` authenticated GETs took (a failed one raises)."""
    took = []
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        for _ in range(count):
            start = time.perf_counter()
            client.get(path).raise_for_status()
            took.append(time.perf_counter() - start)
            time.sleep(0.01)
    return took


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def main() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=max(2000, soft - 500))
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--header-timeout", type=float, default=2.0)
    parser.add_argument(
        "--reopen", action="store_true", help="open a new one for each the daemon closes"
    )
    args = parser.parse_args()
    limits = {"header_timeout_s": args.header_timeout}
    settings: dict[str, Any] = {"agent_mode": "simulate", "tokens": TOKENS, "limits": limits}
    root = os.geteuid() == 0
    where = Path(tempfile.mkdtemp(prefix="stoker-slow-"))
    daemon = Daemon(where / "state", free_port(), settings).start()
    assert daemon.process is not None
    try:
        baseline = timed_gets(daemon.url, TOKENS["other"], args.requests)
        flood = SlowClient(
            daemon.port, args.connections, reopen=args.reopen, user=NOBODY if root else None
        ).start()
        peak, took = 0, []
        # Timed from the flood's start: while its connections are opened, then held.
        while flood.opened.value < args.connections and flood.failed.value < args.connections:
            peak = max(peak, open_files(daemon.process.pid))
            took += timed_gets(daemon.url, TOKENS["other"], 10)
        took += timed_gets(daemon.url, TOKENS["other"], args.requests)
        peak = max(peak, open_files(daemon.process.pid))
        end = flood.stop()
        healthz = httpx.get(f"{daemon.url}/healthz", timeout=10).status_code
    finally:
        daemon.stop()
    results: dict[str, Any] = {
        "header_timeout_s": args.header_timeout,
        "reopen": args.reopen,
        "flood_as": "nobody" if root else "this user",
    }
    for case, times in (("no flood", baseline), ("flood", took)):
        quantiles = statistics.quantiles(times, n=100)
        results[case] = {"p50_s": quantiles[49], "p99_s": quantiles[98]}
        print(f"{case:<9} GET /v1/jobs p50 {quantiles[49] * 1000:.1f} ms, "
              f"p99 {quantiles[98] * 1000:.1f} ms")  # fmt: skip
    results |= {
        "half_open_opened": flood.opened.value,
        "open_failed": flood.failed.value,
        "closed_by_daemon": flood.closed_by_daemon.value,
        **end,
        "daemon_open_files_peak": peak,
        "healthz_after": healthz,
    }
    print(f"half-open opened {flood.opened.value} ({flood.failed.value} failed to open),"
          f" closed by the daemon {flood.closed_by_daemon.value}; the {end['held_at_stop']}"
          f" held at the end closed within {end['last_closed_after_s']:.1f} s"
          f" ({end['still_open']} still open); daemon's open files peaked at {peak}")  # fmt: skip
    print(f"saved {save('slow_clients', {'requests': args.requests, **results})}")


if __name__ == "__main__":
    main()
