"""What the daemon writes is its owner's alone (issue 17, finding 3): the state dir 0700,
every file in it 0600 and every folder 0700, and the same for what its jobs write unless
they choose otherwise (they inherit the daemon's umask, 077). A job run as a tenant's unix
user owns its own folder (daemon/launcher.py `hand_over`); the state and jobs folders above
it are then 0711, passable to reach it but not listable."""

import os
import stat
from pathlib import Path

UMASK = 0o077  # files 0600, folders 0700


def tighten(state_dir: Path, *, passable: bool) -> int:
    """Take group and other access off everything under `state_dir` (a state dir written
    by an older daemon, or by hand); the state and jobs folders keep o+x, g+x when
    `passable` (tenants' unix users reach their own job folders through them). Links are
    left alone, never followed. The paths that were open to others (the o+x given to the
    two folders is not counted)."""
    changed = 0
    keep_x = 0o011 if passable else 0
    for path in (state_dir, *state_dir.rglob("*")):
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:  # gone since the walk listed it
            continue
        if stat.S_ISLNK(mode):
            continue
        wanted = stat.S_IMODE(mode) & 0o700
        if path in (state_dir, state_dir / "jobs"):
            wanted |= keep_x
        if wanted != stat.S_IMODE(mode):
            os.chmod(path, wanted)
            changed += bool(stat.S_IMODE(mode) & ~wanted)
    return changed
