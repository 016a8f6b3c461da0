"""Where a state dir's daemon listens, as the CLI on its machine reaches it."""

import pytest

from daemon.statelock import local_url


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
