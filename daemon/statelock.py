"""One daemon per state dir, where it listens, and the error a state dir that cannot be
used raises."""

import fcntl
import os
import time
from pathlib import Path
from typing import IO

URL_FILE = "daemon.url"  # in the state dir: where its daemon listens (the CLI reads it)
LOCK_FILE = "daemon.lock"


class StoreError(RuntimeError):
    """The state file cannot be used: another schema version, or not a stoker database."""


class StateDirLock:
    """One daemon per state dir: an exclusive lock on `<state dir>/daemon.lock`, held for
    the process's life (the kernel drops it when the process dies, even by kill -9)."""

    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / LOCK_FILE
        self._file = self.path.open("a+")
        try:
            _lock_soon(self._file)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().strip() or "unknown"
            self._file.close()
            raise StoreError(
                f"another stoker daemon (pid {holder}) uses {state_dir}; stop it, or give "
                "this one another --state-dir"
            ) from None
        self._file.seek(0)
        self._file.truncate()
        self._file.write(f"{os.getpid()}\n")
        self._file.flush()

    def release(self) -> None:
        self._file.close()  # closing drops the lock


def _lock_soon(file: IO[str]) -> None:
    """The exclusive lock, waiting up to half a second for it: a CLI command that asks
    whether a daemon holds the state dir takes a shared lock for an instant
    (`daemon_holds`). BlockingIOError when it stays taken."""
    for _ in range(10):
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(0.05)
    fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)


def daemon_holds(state_dir: Path) -> bool | None:
    """Whether a daemon holds `state_dir` now (its lock is taken); None when that cannot
    be told (the lock file cannot be opened)."""
    try:
        with (state_dir / LOCK_FILE).open("r") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            return False  # closing the file drops the shared lock just taken
    except FileNotFoundError:
        return False
    except OSError:
        return None


def local_url(host: str, port: int) -> str:
    """The daemon's URL as a client on its own machine reaches it: an address that binds
    every interface is reached on loopback."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
