"""The daemon's tokens: the admin token a start without configured ones writes, and what
becomes of it once tokens are configured."""

import logging
import stat
from pathlib import Path

import pytest

from daemon.auth import load_tokens
from daemon.config import DaemonConfig
from daemon.tenants import ADMIN


def test_a_token_file_from_a_start_without_tokens_is_removed_once_they_are_configured(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    first = load_tokens(DaemonConfig(state_dir=state))
    written = state / "admin.token"
    assert first == {ADMIN: written.read_text().strip()}
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert load_tokens(DaemonConfig(state_dir=state)) == first, "the same on the next start"
    configured = {ADMIN: "an-admin-token-of-the-operators-0123", "alice": "a" * 24}
    with caplog.at_level(logging.WARNING, logger="daemon.auth"):
        assert load_tokens(DaemonConfig(state_dir=state, tokens=configured)) == configured
    assert not written.exists(), "it grants nothing now: the CLI would send it and get a 401"
    assert "grants nothing now and was removed" in caplog.text
