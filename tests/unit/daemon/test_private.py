"""The state dir is its owner's alone; the two folders above a tenant's job folder are
passable to tenants' unix users."""

import stat
from pathlib import Path

from daemon.private import tighten


def test_only_what_was_open_to_others_is_counted_not_the_passage_given(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "jobs").mkdir(parents=True, mode=0o700)
    state.chmod(0o700)
    assert tighten(state, passable=True) == 0, "a fresh state dir was open to no one"
    assert stat.S_IMODE(state.stat().st_mode) == stat.S_IMODE((state / "jobs").stat().st_mode)
    assert stat.S_IMODE(state.stat().st_mode) == 0o711
    token = state / "admin.token"
    token.write_text("secret")
    token.chmod(0o644)
    assert tighten(state, passable=True) == 1
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert tighten(state, passable=False) == 2, "both folders were passable: open to others"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
