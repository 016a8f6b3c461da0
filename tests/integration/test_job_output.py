"""A job's output as its terminal shows it (issue 36): both streams in the order the script
wrote them, from `GET /v1/jobs/ID/logs` with no stream named and from `stoker logs ID`
(its stdout on stdout, its stderr on stderr), each stream still readable alone. Real
processes and their log sinks (daemon/logsink.py)."""

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.cli import stoker
from tests.integration.daemon_harness import Daemon, daemon_factory, ended, wait_for

SCRIPT = (
    "import sys, time\n"
    "for n in range(3):\n"
    "    print(f'out {n}', flush=True)\n"
    "    time.sleep(0.05)\n"
    "    print(f'err {n}', file=sys.stderr, flush=True)\n"
    "    time.sleep(0.05)\n"
)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    yield from daemon_factory(tmp_path)


def test_a_jobs_two_streams_are_served_in_the_order_it_wrote_them(
    serve: Callable[..., Daemon], tmp_path: Path
) -> None:
    daemon = serve()
    where = ("--url", daemon.url, "--state-dir", str(daemon.state_dir))
    submitted = stoker("submit", *where, "--", sys.executable, "-c", SCRIPT, cwd=tmp_path)
    job_id = submitted.stdout.strip()
    with daemon.client() as client:
        wait_for("its end", lambda: ended(client, job_id) is not None)
        wait_for("its exit", lambda: not client.get(f"/v1/jobs/{job_id}").json()["exiting"])
        both = client.get(f"/v1/jobs/{job_id}/logs").text.splitlines()
        assert both == [
            f"[rank 0{' stderr' if kind == 'err' else ''}] {kind} {n}"
            for n in range(3)
            for kind in ("out", "err")
        ]
        alone = client.get(f"/v1/jobs/{job_id}/logs", params={"stream": "stderr"}).text
        assert alone.splitlines() == [f"[rank 0] err {n}" for n in range(3)]
    shown = stoker("logs", job_id, *where)
    assert shown.stdout.splitlines() == [f"[rank 0] out {n}" for n in range(3)]
    assert shown.stderr.splitlines() == [f"[rank 0] err {n}" for n in range(3)]
    only = stoker("logs", job_id, "--stdout", *where)
    assert only.stdout == shown.stdout and not only.stderr
