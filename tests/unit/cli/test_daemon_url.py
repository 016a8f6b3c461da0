"""Where the CLI sends a token: the daemon's own address, never a guess."""

import os
import pwd
from pathlib import Path

import pytest
import typer

from cli.connection import _url_of_running
from daemon.statelock import URL_FILE, StateDirLock


@pytest.mark.skipif(os.geteuid() != 0, reason="gives the file to another user")
def test_a_daemon_url_this_user_cannot_read_is_said_not_guessed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A tenant's CLI given the node's state dir: the daemon's `daemon.url` is the daemon
    # user's (0600). Trying the default URL instead would send the token to whatever
    # listens there.
    lock = StateDirLock(tmp_path)
    try:
        url_file = tmp_path / URL_FILE
        url_file.write_text("http://127.0.0.1:8622\n")
        assert _url_of_running(tmp_path) == "http://127.0.0.1:8622", "this user's: read"
        os.chown(url_file, pwd.getpwnam("nobody").pw_uid, -1)
        with pytest.raises(typer.Exit):
            _url_of_running(tmp_path)
    finally:
        lock.release()
    said = capsys.readouterr().err
    assert f"this user cannot read {tmp_path}/daemon.url (it is nobody's)" in said, said
    assert "give the daemon's address with --url or STOKER_URL" in said
