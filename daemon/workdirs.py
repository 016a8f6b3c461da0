"""A command job's `workdir`, checked once at submit and kept as the folder it resolved to:
every launch of the job (its relaunches too) runs in that folder, entered as the job's user
(daemon/trampoline.py), and fails, naming it, where a link on the way leads elsewhere since.
A link swapped after the submit cannot lead a job out of its tenant's roots, nor into a
folder its user may not enter (issue 37, finding 3).

`workdir_roots` unset does not mean the user's home: a service account's home is often
none (`nobody`'s is /nonexistent), and data lives elsewhere (/data/alice). The job's own
user's permissions bound it instead: a folder that user may not enter is refused at submit
with the same words as one that does not exist, and cannot be entered at launch."""

import os
import stat
from pathlib import Path

from daemon.config import TenantPolicy
from daemon.items import SubmitError
from daemon.tenants import UnixUser


def checked_workdir(workdir: str, policy: TenantPolicy, user: UnixUser | None, tenant: str) -> str:
    """`workdir` with every link on the way followed, as it is to be stored and used; a
    SubmitError naming the field when it leaves the tenant's `workdir_roots` (checked
    first: a refusal says nothing of what exists outside them), or is not a folder that
    `user` (None: the daemon's) may enter."""
    where = f"tenants.{tenant}.workdir_roots"
    resolved = inside_roots("workdir", workdir, policy.workdir_roots, where)
    if not resolved.is_dir() or (user is not None and not may_enter(resolved, user)):
        who = f" that its unix user ({user.name}) may enter" if user is not None else ""
        raise SubmitError("workdir", f"{workdir!r} is not a directory on the node{who}")
    return str(resolved)


def inside_roots(field: str, path: str, roots: list[Path] | None, setting: str) -> Path:
    """`path` with every link followed; a SubmitError naming `field` and `setting` unless
    it lies in one of `roots` (None: anywhere)."""
    resolved = Path(path).resolve()
    if roots is not None and not any(resolved.is_relative_to(root.resolve()) for root in roots):
        allowed = ", ".join(str(root) for root in roots) or "none"
        raise SubmitError(field, f"must lie in {setting} ({allowed})")
    return resolved


def may_enter(folder: Path, user: UnixUser) -> bool:
    """Whether `user`, with its own group alone (as its jobs run), may pass through every
    folder down to `folder` (a resolved path), by their mode bits; nothing past the first
    folder it may not pass is looked at."""
    if user.uid == 0:
        return True
    for step in (*reversed(folder.parents), folder):
        try:
            info = os.stat(step)
        except OSError:
            return False
        if info.st_uid == user.uid:
            allowed = info.st_mode & stat.S_IXUSR
        elif info.st_gid == user.gid:
            allowed = info.st_mode & stat.S_IXGRP
        else:
            allowed = info.st_mode & stat.S_IXOTH
        if not allowed:
            return False
    return True
