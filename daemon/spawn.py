"""Starting one job process through the trampoline (daemon/trampoline.py): it joins the
job's cgroup, becomes the job's user and only then enters the job's workdir, before it
executes the job's command. A failure raises the OSError Popen would have raised; one of
the workdir is a `WorkdirError` naming it, and `daemons_own` tells a launch that failed for
the node's reasons (no file descriptors, memory or processes left), which is tried again,
from one that failed for the job's."""

import errno
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from daemon.tenants import UnixUser

TRAMPOLINE = str(Path(__file__).resolve().with_name("trampoline.py"))
# What the node lacked, not the job: the same launch may succeed a moment later.
_NODES_OWN = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN, errno.ENOBUFS})


class WorkdirError(OSError):
    """The job's user could not enter its workdir, or it led elsewhere than at submit."""


class CgroupError(OSError):
    """The job's process could not join its cgroup: the daemon's to fix, not the job's."""


def daemons_own(error: BaseException) -> bool:
    """Whether a launch failed for the daemon's or the node's reasons (EMFILE, ENFILE,
    ENOMEM, EAGAIN from fork): tried again after a pause, never the job's failure."""
    if isinstance(error, CgroupError):
        return True
    return isinstance(error, OSError) and error.errno in _NODES_OWN


def spawn(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    stdout: int,
    stderr: int,
    workdir: Path | None = None,
    user: UnixUser | None = None,
    cgroup: Path | None = None,
    process_group: int | None = None,
    new_session: bool = False,
) -> subprocess.Popen[bytes]:
    """Start `argv` with exactly `env`, as `user` (None: the daemon's), in `workdir` (None:
    the daemon's), inside `cgroup`; returns once the command is executing."""
    told_read, told_write = os.pipe()
    try:
        answer_read, answer_write = os.pipe()
    except OSError:
        os.close(told_read)
        os.close(told_write)
        raise
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", TRAMPOLINE, str(told_read), str(answer_write)],
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            env={},  # the trampoline runs as the daemon's user: none of the job's variables
            pass_fds=(told_read, answer_write),
            start_new_session=new_session,
            process_group=process_group,
        )
    except BaseException:
        for descriptor in (told_write, answer_read):
            os.close(descriptor)
        raise
    finally:
        os.close(told_read)
        os.close(answer_write)
    payload = {
        "argv": list(argv),
        "env": dict(env),
        "workdir": str(workdir) if workdir is not None else None,
        "uid": user.uid if user is not None else None,
        "gid": user.gid if user is not None else None,
        "cgroup": str(cgroup) if cgroup is not None else None,
    }
    try:
        with open(told_write, "wb") as pipe:
            pipe.write(json.dumps(payload).encode())
    except BrokenPipeError:
        pass  # it ended before reading: its answer, or its exit, says why
    with open(answer_read, "rb") as pipe:
        answer = pipe.read()
    if not answer:  # closed by its exec (or its end, whose stderr is in the job's log)
        return process
    process.wait()
    raise _error(json.loads(answer))


def _error(said: dict[str, object]) -> OSError:
    """The OSError a trampoline's answer stands for."""
    number = int(str(said["errno"]))
    filename = str(said["filename"])
    strerror = str(said.get("strerror") or os.strerror(number))
    match said["step"]:
        case "workdir":
            return WorkdirError(number, strerror, filename)
        case "cgroup":
            return CgroupError(number, strerror, filename)
        case _:
            return OSError(number, strerror, filename)  # FileNotFoundError and its kin
