"""Issue 37, findings 5 and 14: a log follow read a job's whole log at once, so a job that
grew its log to 2 GB (a sparse file) took the daemon to 4.3 GB and another tenant's
/healthz to 25 s; and log follows had no cap, as event streams have."""

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.daemon_harness import FAST, Daemon, daemon_factory, wait_for

TOKENS = {
    "admin": "admin-token-follow-bounds-0123456789",
    "alice": "alice-token-follow-bounds-0123456789",
    "bob": "bob-token-follow-bounds-0123456789ab",
}
TALKER = "import time\nwhile True:\n    print('still here', flush=True)\n    time.sleep(0.2)\n"
# The talker never says the SDK's hello: it runs (unmanaged) after unmanaged_after_s, and,
# cancelled, is stopped after cancel_grace_s; both 30 s and 5 s by default.
QUICK = {**FAST["scheduler"], "unmanaged_after_s": 1.0, "cancel_grace_s": 0.5}  # type: ignore[dict-item]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    yield from daemon_factory(tmp_path)


def _running_job(client: httpx.Client, name: str) -> str:
    body = {"name": name, "command": [sys.executable, "-c", TALKER], "batch_size": 8, "gpus": 1}
    job_id: str = client.post("/v1/jobs", json=body).raise_for_status().json()["id"]
    wait_for("it to run", lambda: client.get(f"/v1/jobs/{job_id}").json()["state"] == "running")
    return job_id


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_following_a_log_grown_to_2_gb_keeps_the_daemon_small_and_fast(
    serve: Callable[..., Daemon],
) -> None:
    daemon = serve(tokens=TOKENS, scheduler=QUICK)
    assert daemon.process is not None
    with daemon.client("alice") as alice, daemon.client("bob") as bob:
        job_id = _running_job(alice, "sparse")
        log = daemon.state_dir / "jobs" / job_id / "stdout.log"
        before = _rss_bytes(daemon.process.pid)
        received = [0]

        def follow() -> None:
            params = {"stream": "stdout", "follow": "true"}
            with alice.stream("GET", f"/v1/jobs/{job_id}/logs", params=params) as answer:
                for chunk in answer.iter_bytes():
                    received[0] += len(chunk)

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        peak, slowest = before, 0.0
        for _ in range(3):  # what the job did: its log to 2 GB, over and over
            os.truncate(log, 2 * 2**30)
            for _ in range(3):
                started = time.perf_counter()
                bob.get("/healthz").raise_for_status()
                slowest = max(slowest, time.perf_counter() - started)
                peak = max(peak, _rss_bytes(daemon.process.pid))
                time.sleep(0.1)
            os.truncate(log, 0)
        alice.delete(f"/v1/jobs/{job_id}").raise_for_status()
        follower.join(timeout=60)
    assert received[0] > 0, "the follow went on"
    assert peak - before < 200 * 2**20, f"the daemon grew {(peak - before) / 2**20:.0f} MiB"
    assert slowest < 2.0, f"bob's /healthz took {slowest:.1f} s"
