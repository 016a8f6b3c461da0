"""The agent protocol refuses what it does not know and round-trips what it does."""

import json

import pytest

from agents.protocol import (
    MAX_MESSAGE_BYTES,
    PROTOCOL_VARIABLE,
    VERSION,
    HeartbeatMessage,
    Hello,
    MetricPoint,
    MetricsMessage,
    ProtocolError,
    ResumeMessage,
    ShareMessage,
    daemon_version,
    decode_agent,
    decode_daemon,
    encode,
)


def test_messages_round_trip_both_ways() -> None:
    hello = Hello(job="j1", gen=3, pid=42, state="running", iteration=7)
    assert decode_agent(encode(hello)) == hello
    resume = ResumeMessage(job="j1", gen=4, workers_per_gpu=3, decoder_share=0.25)
    assert decode_daemon(encode(resume)) == resume


def test_metrics_carry_nan_and_infinity_and_refuse_oversized_points() -> None:
    loss = MetricPoint(step=3, values={"loss": float("nan"), "grad_norm": float("inf")})
    back = decode_agent(encode(MetricsMessage(job="j1", points=[loss])))
    assert isinstance(back, MetricsMessage)
    values = back.points[0].values
    assert values["loss"] != values["loss"] and values["grad_norm"] == float("inf")
    too_many = {f"m{index}": 1.0 for index in range(33)}
    with pytest.raises(ProtocolError, match=r"points\.0\.values"):
        decode_agent(
            b'{"type": "metrics", "job": "j", "points": [{"step": 1, "values": %s}]}'
            % str(too_many).replace("'", '"').encode()
        )


@pytest.mark.parametrize(
    ("data", "names"),
    [
        (b'{"type": "hello", "job": "j", "pid": 1, "colour": 2}', "hello.colour"),
        (b'{"type": "launch", "job": "j"}', "does not match"),
        (b'{"type": "hello", "job": "j", "pid": 1, "v": 11}', "hello.v"),
        (b'{"type": "heartbeat", "job": "j", "iteration": -1}', "heartbeat.iteration"),
        (b"\xff\xfe", "Invalid JSON"),
        (b'{"type": "pause", "job": "j"}', "does not match"),  # daemon-bound only
    ],
)
def test_bad_agent_messages_say_what_is_wrong(data: bytes, names: str) -> None:
    with pytest.raises(ProtocolError) as raised:
        decode_agent(data)
    assert names in raised.value.reason


def test_oversized_messages_are_refused_before_parsing() -> None:
    with pytest.raises(ProtocolError, match="limit"):
        decode_agent(b" " * (MAX_MESSAGE_BYTES + 1))


def test_a_heartbeat_carries_the_measured_split_of_time() -> None:
    beat = HeartbeatMessage(
        job="j", iteration=10, samples=640, idle_s=0.2, step_s=0.8, samples_per_s=640.0, workers=2
    )
    assert decode_agent(encode(beat)) == beat


def test_version_2_adds_a_live_share_and_version_1_is_still_understood() -> None:
    message = decode_daemon(b'{"type": "share", "job": "j", "gen": 3, "decoder_share": 0.25}')
    assert isinstance(message, ShareMessage)
    assert (message.v, message.gen, message.decoder_share) == (VERSION, 3, 0.25)
    old = decode_agent(b'{"type": "hello", "job": "j", "pid": 1, "v": 1}')
    assert old.v == 1
    with pytest.raises(ProtocolError, match="decoder_share"):
        decode_daemon(b'{"type": "share", "job": "j", "decoder_share": 1.5}')


def test_version_4_adds_the_loader_timing_and_a_message_of_3_leaves_it_out() -> None:
    timed = HeartbeatMessage(
        job="j", iteration=5, samples=40, idle_s=0.2, step_s=0.8, samples_per_s=40.0,
        workers=2, loader_s=0.012,
    )  # fmt: skip
    assert decode_agent(encode(timed)) == timed
    as_three = timed.model_copy(update={"v": 3})
    data = json.loads(encode(as_three))
    assert data["v"] == 3 and "loader_s" not in data, "a daemon of version 3 refuses it"
    assert "secret" not in data, "nor is an empty secret sent"


def test_version_7_adds_the_last_word_of_a_script_and_a_message_of_6_leaves_it_out() -> None:
    last = HeartbeatMessage(
        job="j", iteration=5, samples=40, idle_s=0.0, step_s=0.0, samples_per_s=0.0,
        workers=2, last=True,
    )  # fmt: skip
    assert decode_agent(encode(last)) == last
    assert "last" not in json.loads(encode(last.model_copy(update={"v": 6})))
    assert "last" not in json.loads(encode(last.model_copy(update={"last": False})))


@pytest.mark.parametrize(
    ("version", "added", "kept", "refused"),
    [
        (5, {"loader_cpu_s": 0.006, "loader_wait_s": 0.003, "cpu_s": 0.02}, "loader_s", "cpu_s"),
        (6, {"train_cpu_s": 0.015, "train_wait_s": 0.01, "refill_s": 0.2}, "cpu_s", "refill_s"),
        (8, {"total_iterations": 360}, "cpu_s", "total_iterations"),
        (9, {"batch_samples": 32}, "cpu_s", "batch_samples"),
    ],
)
def test_each_version_adds_heartbeat_fields_that_a_message_of_the_one_before_leaves_out(
    version: int, added: dict[str, float | int], kept: str, refused: str
) -> None:
    before = {"loader_s": 0.012, "cpu_s": 0.02} if version > 5 else {"loader_s": 0.012}
    seen = HeartbeatMessage(
        job="j", iteration=5, samples=40, idle_s=0.3, step_s=0.7, samples_per_s=40.0,
        workers=2, **before, **added,
    )  # fmt: skip
    assert decode_agent(encode(seen)) == seen
    data = json.loads(encode(seen.model_copy(update={"v": version - 1})))
    assert data[kept] == before[kept], f"version {version - 1}'s field stays"
    assert not set(added) & set(data), f"version {version - 1} refuses them"
    bad = encode(seen).replace(f'"{refused}":{added[refused]}'.encode(), f'"{refused}":-1'.encode())
    with pytest.raises(ProtocolError) as raised:
        decode_agent(bad)
    assert raised.value.reason.split(":")[0] == f"heartbeat.{refused}", raised.value.reason


@pytest.mark.parametrize(
    ("said", "speaks"),
    [
        (None, 3),
        ("4", 4),
        ("5", 5),
        ("6", 6),
        ("7", 7),
        ("8", 8),
        ("2", 2),
        ("99", VERSION),
        ("four", 3),
    ],
)
def test_an_agent_speaks_the_version_its_daemon_said(said: str | None, speaks: int) -> None:
    environ = {} if said is None else {PROTOCOL_VARIABLE: said}
    assert daemon_version(environ) == speaks
