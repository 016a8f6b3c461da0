"""Whether a daemon holds a state dir, and where it listens, as the CLI on its machine
reaches it."""

from pathlib import Path

import pytest

from daemon.statelock import StateDirLock, daemon_holds, local_url


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8470"),
        ("0.0.0.0", "http://127.0.0.1:8470"),
        ("::", "http://[::1]:8470"),
        ("::1", "http://[::1]:8470"),
        ("gpu-node-3", "http://gpu-node-3:8470"),
    ],
)
def test_a_daemon_bound_to_every_interface_is_reached_on_loopback(host: str, url: str) -> None:
    assert local_url(host, 8470) == url


def test_whether_a_daemon_holds_a_state_dir_is_read_from_its_lock(tmp_path: Path) -> None:
    assert daemon_holds(tmp_path / "never-used") is False
    lock = StateDirLock(tmp_path / "state")
    assert daemon_holds(tmp_path / "state") is True
    lock.release()
    assert daemon_holds(tmp_path / "state") is False
    StateDirLock(tmp_path / "state").release()  # the check took no lock a daemon then meets
