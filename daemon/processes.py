"""Probing and stopping processes by pid: whether one runs, whether a group does, whether
a pid is this state dir's agent of a job, and stopping a process group whole."""

import contextlib
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

import psutil


def alive(pid: int) -> bool:
    """Whether `pid` runs and is not a zombie."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # it exists; it is someone else's


def group_alive(leader: int) -> bool:
    """Whether a process of the group `leader` led still runs (the leader may be gone)."""
    if alive(leader):
        return True
    try:
        os.killpg(leader, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # its processes exist; they are someone else's
    return True


def is_agent(pid: int, job_id: str, job_dir: Path) -> bool:
    """Whether `pid` is alive and is an agent of `job_id` launched for `job_dir`: its
    environment names that folder (STOKER_JOB_DIR), so that neither a pid reused after a
    reboot nor an agent of another daemon (one started on a copy of this state dir, whose
    jobs have the same ids) is ever adopted or signalled (issue 17, finding 6)."""
    if not alive(pid):
        return False
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except (FileNotFoundError, PermissionError):
        return False
    return (
        f"STOKER_JOB_ID={job_id}".encode() in environ
        and f"STOKER_JOB_DIR={job_dir}".encode() in environ
    )


def stop_group(pid: int, grace_s: float, children: Sequence[int] = ()) -> None:
    """Stop the process group led by `pid`, whether or not we started it: SIGTERM, and
    SIGKILL to what is left of the group after `grace_s`. The group is waited for, not its
    leader alone: rank 0 may leave at once while another rank, stuck in a collective, does
    not. `children`: the group's other processes that are ours, reaped as they exit."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    waited = 0.0
    while waited < grace_s:
        for child in (pid, *children):  # ours: reaped, so killpg(…, 0) sees no zombie
            with contextlib.suppress(ChildProcessError):
                os.waitpid(child, os.WNOHANG)
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
        waited += 0.05
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
