"""The daemon process never loads torch or matplotlib (DESIGN.md): read what a running
`stoker serve` has mapped, after it has planned and launched a job."""

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.daemon_harness import Daemon, daemon_factory, job_body, wait_for

HEAVY = ("torch", "matplotlib")


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    yield from daemon_factory(tmp_path)


def mapped_files(pid: int) -> set[str]:
    """The files a process has mapped: its shared libraries and extension modules."""
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return {line.split(maxsplit=5)[5] for line in maps if len(line.split(maxsplit=5)) == 6}


def test_a_serving_daemon_has_neither_torch_nor_matplotlib_loaded(
    serve: Callable[..., Daemon], tmp_path: Path
) -> None:
    daemon = serve()
    with daemon.client() as client:
        job = client.post("/v1/jobs", json=job_body("a", iterations=100_000)).json()
        wait_for(
            "the job to run",
            lambda: client.get(f"/v1/jobs/{job['id']}").json()["state"] == "running",
        )
    assert daemon.process is not None
    files = mapped_files(daemon.process.pid)
    assert any("zmq" in path for path in files), "the probe sees extension modules"
    # Any path naming them (torch/lib/libtorch*.so, torch.libs/, matplotlib/_path*.so, a
    # system libtorch), except the daemon's own state files, which sit under this test's
    # directory, whose name says torch and matplotlib.
    outside = {path for path in files if not path.startswith(str(tmp_path))}
    heavy = sorted(path for path in outside if any(name in path for name in HEAVY))
    assert heavy == [], f"the daemon mapped {heavy[:5]}"
