"""Files in a job's folder as the daemon opens them. Under per-tenant unix users the folder
is the tenant's, and the daemon may be root: any name in it may be a symbolic link to a file
of the daemon's (which a write would then chown, truncate or fill, and a read show to the
tenant), a hard link to one, or a FIFO that would block a reader, and with it the daemon.

Every open here refuses a link (`O_NOFOLLOW`), opens without blocking (`O_NONBLOCK`), and
checks what it opened before using it: a regular file, not another name for one of root's
files, owned by one of the users given when that is asked (writes ask it). (The
folder itself the tenant cannot swap: `jobs/` is the daemon's.)
"""

import errno
import os
import stat
from collections.abc import Callable, Collection
from pathlib import Path
from typing import BinaryIO

# Added to every open of a name in a job's folder: no link followed, no FIFO waited on.
NO_SURPRISES = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafeJobFile(OSError):
    """A name in a job's folder that is not a plain file of the job's: never used."""


def open_checked(path: Path, flags: int, owners: Collection[int] | None = None) -> int:
    """`os.open(path, flags)` (new files 0600) on a regular file that is not another name
    for one of root's files, owned by one of `owners` when given; UnsafeJobFile for
    anything else, OSError as os.open."""
    try:
        descriptor = os.open(path, flags | NO_SURPRISES, 0o600)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UnsafeJobFile(errno.ELOOP, "a symbolic link, not a file", str(path)) from None
        raise
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeJobFile(errno.EINVAL, "not a regular file", str(path))
        if info.st_nlink != 1 and info.st_uid == os.geteuid() == 0:
            # Another name for one of root's files. (A job's own file by another name is
            # its business; a daemon that is not root has nothing its jobs could not
            # write anyway.)
            raise UnsafeJobFile(errno.EMLINK, "a file with another name (a hard link)", str(path))
        if owners is not None and info.st_uid not in owners:
            raise UnsafeJobFile(errno.EPERM, f"owned by uid {info.st_uid}", str(path))
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def append_to(path: Path, owners: Collection[int]) -> BinaryIO:
    """`path` opened to append (made if missing), checked as `open_checked` does."""
    return os.fdopen(open_checked(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, owners), "ab")


def read_from(path: Path, offset: int) -> tuple[bytes, int]:
    """What `path` holds from `offset` and its size; from the start when it is shorter than
    `offset` (a log cut since)."""
    return _read(path, lambda size: offset if offset <= size else 0)


def read_end(path: Path, limit: int) -> tuple[bytes, int]:
    """The last `limit` bytes of `path` and its size."""
    return _read(path, lambda size: max(0, size - limit))


def _read(path: Path, start: Callable[[int], int]) -> tuple[bytes, int]:
    """`path` from `start(its size)` on, and its size; (b"", 0) when it is missing, unsafe
    (UnsafeJobFile: a job's own doing) or unreadable: shown as an empty log, never a
    daemon error."""
    try:
        descriptor = open_checked(path, os.O_RDONLY)
    except OSError:
        return b"", 0
    with os.fdopen(descriptor, "rb") as opened:
        size = os.fstat(descriptor).st_size
        opened.seek(start(size))
        return opened.read(), size
