"""Issue 37, findings 1 and 9: every number an agent sends has a physical range and no
float is infinite or NaN, refused at the edge naming the field; the launch's secret is in
no message's repr or str (a log line), though still in its bytes."""

import json
from pathlib import Path

import pytest

from agents.protocol import (
    FINISHED_MARKER,
    LAST_STEP_MARKER,
    AliveMessage,
    FailedMessage,
    FinishedMessage,
    HeartbeatMessage,
    Hello,
    MetricPoint,
    MetricsMessage,
    PausedMessage,
    ProtocolError,
    ResumedMessage,
    decode_agent,
    encode,
    read_finished_marker,
    read_last_step_marker,
)

# One valid message of each type an agent sends, as JSON objects.
VALID: dict[str, dict[str, object]] = {
    "hello": {"pid": 12, "iteration": 3, "workers": 2, "share": 0.5},
    "heartbeat": {
        "iteration": 10,
        "samples": 640,
        "idle_s": 0.1,
        "step_s": 0.9,
        "samples_per_s": 64.0,
        "workers": 2,
        "loader_s": 0.01,
        "cpu_s": 0.02,
        "total_iterations": 100,
        "batch_samples": 64,
    },
    "alive": {"phase": "setup", "iteration": 1},
    "metrics": {"points": [{"step": 1, "values": {"loss": 0.5}}]},
    "paused": {"iteration": 4, "checkpoint": ""},
    "resumed": {"workers": 2, "gap_s": 1.5},
    "finished": {"iteration": 9},
    "failed": {"error": "boom"},
}
# Every number an agent sends, by message type: (field, a value past its range).
ABSURD = [
    ("hello", "pid", 2**64),
    ("hello", "iteration", 2**64),
    ("hello", "workers", 10**9),
    ("hello", "gen", 2**64),
    ("hello", "ts", 1e308),
    ("heartbeat", "samples", 10**18),
    ("heartbeat", "iteration", 2**64),
    ("heartbeat", "idle_s", 1e308),
    ("heartbeat", "step_s", 1e308),
    ("heartbeat", "samples_per_s", 1e308),
    ("heartbeat", "workers", 2**40),
    ("heartbeat", "loader_s", 1e300),
    ("heartbeat", "cpu_s", 1e300),
    ("heartbeat", "total_iterations", 2**64),
    ("heartbeat", "batch_samples", 2**64),
    ("heartbeat", "share", 2.0),
    ("heartbeat", "samples", -1),
    ("alive", "iteration", 2**64),
    ("paused", "iteration", 2**64),
    ("resumed", "gap_s", 1e308),
    ("resumed", "workers", 2**40),
    ("finished", "iteration", 2**64),
    ("failed", "gen", 2**64),
]


def _bytes(kind: str, **changes: object) -> bytes:
    return json.dumps({"type": kind, "job": "a", **VALID[kind], **changes}).encode()


@pytest.mark.parametrize("kind", sorted(VALID))
def test_each_valid_message_is_read(kind: str) -> None:
    assert decode_agent(_bytes(kind)).type == kind


@pytest.mark.parametrize(("kind", "name", "value"), ABSURD)
def test_a_number_past_its_range_is_refused_naming_its_field(
    kind: str, name: str, value: object
) -> None:
    with pytest.raises(ProtocolError, match=rf"^{kind}\.{name}: "):
        decode_agent(_bytes(kind, **{name: value}))


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN"])
@pytest.mark.parametrize("name", ["idle_s", "step_s", "samples_per_s", "loader_s", "ts"])
def test_an_infinite_or_nan_float_is_refused(literal: str, name: str) -> None:
    """JSON's non-standard literals, which Python's json writes and pydantic read before."""
    text = _bytes("heartbeat", **{name: "LITERAL"}).replace(b'"LITERAL"', literal.encode())
    with pytest.raises(ProtocolError, match=rf"^heartbeat\.{name}: "):
        decode_agent(text)


def test_a_metric_step_past_its_range_is_refused() -> None:
    points = [{"step": 2**64, "values": {"loss": 0.5}}]
    with pytest.raises(ProtocolError, match=r"^metrics\.points\.0\.step: "):
        decode_agent(_bytes("metrics", points=points))


def test_the_secret_is_in_no_repr_or_str_but_in_the_bytes() -> None:
    secret = "s3cr3t-of-the-launch-0123456789"
    messages = [
        Hello(job="a", pid=1, secret=secret),
        HeartbeatMessage(
            job="a",
            iteration=1,
            samples=1,
            idle_s=0.0,
            step_s=1.0,
            samples_per_s=1.0,
            workers=1,
            secret=secret,
        ),
        AliveMessage(job="a", secret=secret),
        MetricsMessage(job="a", points=[MetricPoint(step=1, values={})], secret=secret),
        PausedMessage(job="a", iteration=1, secret=secret),
        ResumedMessage(job="a", workers=1, gap_s=0.0, secret=secret),
        FinishedMessage(job="a", secret=secret),
        FailedMessage(job="a", error="x", secret=secret),
    ]
    for message in messages:
        assert secret not in repr(message) and secret not in str(message), message
        assert secret not in repr([message]), "nor inside a container's repr (a log's item)"
        assert secret.encode() in encode(message), "the daemon still reads it"


@pytest.mark.parametrize("marker", [FINISHED_MARKER, LAST_STEP_MARKER])
def test_a_marker_with_an_absurd_step_is_not_read(tmp_path: Path, marker: str) -> None:
    """A job's folder is its own: a marker it wrote with 2^64 steps would overflow SQLite."""
    read = read_finished_marker if marker == FINISHED_MARKER else read_last_step_marker
    (tmp_path / marker).write_text(json.dumps({"iteration": 2**64}))
    assert read(tmp_path) is None
    (tmp_path / marker).write_text(json.dumps({"iteration": 12}))
    assert read(tmp_path) == 12
