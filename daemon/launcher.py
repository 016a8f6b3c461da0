"""Starting and stopping agent processes: one per job, each in its own process group, its
stdout and stderr in `<state dir>/jobs/<id>/`."""

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

log = logging.getLogger(__name__)


class Launcher:
    def __init__(self, jobs_dir: Path) -> None:
        self.jobs_dir = jobs_dir
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self._adopted: dict[str, int] = {}  # job -> pid of an agent another daemon started

    def job_dir(self, job_id: str) -> Path:
        path = self.jobs_dir / job_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def launch(self, job_id: str, argv: Sequence[str], env: Mapping[str, str]) -> int:
        """Start the agent; its pid."""
        directory = self.job_dir(job_id)
        with (
            (directory / "stdout.log").open("ab") as out,
            (directory / "stderr.log").open("ab") as err,
        ):
            process = subprocess.Popen(
                list(argv),
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **env},
                start_new_session=True,  # its own process group: signals reach its workers too
            )
        self._processes[job_id] = process
        log.info("job %s: agent started, pid %d", job_id, process.pid)
        return process.pid

    def adopt(self, job_id: str, pid: int) -> None:
        """Watch an agent a previous daemon started; its exit code is not ours to read."""
        self._adopted[job_id] = pid

    def exited(self) -> list[tuple[str, int | None]]:
        """(job id, exit code) of every agent that ended since the last call; the code is
        None for an adopted agent."""
        done: list[tuple[str, int | None]] = [
            (job_id, p.returncode) for job_id, p in self._processes.items() if p.poll() is not None
        ]
        done += [(job_id, None) for job_id, pid in self._adopted.items() if not alive(pid)]
        for job_id, _ in done:
            self._processes.pop(job_id, None)
            self._adopted.pop(job_id, None)
        return done

    def running(self, job_id: str) -> bool:
        return job_id in self._processes or job_id in self._adopted

    def stop(self, job_id: str, grace_s: float = 5.0) -> None:
        """SIGTERM the job's process group, SIGKILL after `grace_s`."""
        process = self._processes.pop(job_id, None)
        if process is not None:
            stop_group(process.pid, grace_s)
            process.wait()
        pid = self._adopted.pop(job_id, None)
        if pid is not None:
            stop_group(pid, grace_s)

    def stop_all(self, grace_s: float = 5.0) -> None:
        for job_id in [*self._processes, *self._adopted]:
            self.stop(job_id, grace_s)


def alive(pid: int) -> bool:
    """Whether `pid` runs and is not a zombie."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # it exists; it is someone else's


def is_agent(pid: int, job_id: str) -> bool:
    """Whether `pid` is alive and is an agent of `job_id` (its command line says so), so
    that a pid reused after a reboot is never signalled."""
    if not alive(pid):
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, PermissionError):
        return False
    return b"--job" in argv and job_id.encode() in argv


def stop_group(pid: int, grace_s: float) -> None:
    """Stop the process group led by `pid`, whether or not we started it."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    waited = 0.0
    while waited < grace_s:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        try:  # our own child: reap it so killpg(…, 0) stops seeing a zombie
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            pass
        time.sleep(0.05)
        waited += 0.05
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
