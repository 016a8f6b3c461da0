"""An agent's link to the daemon over real ZeroMQ ipc: its thread sends what the caller
posts, in order, and hands in what the daemon sends; a boundary learns that nothing came
from one attribute; a restarted daemon is noticed; closing gets every queued message out.
The daemon's end is a ROUTER by hand (bench/agent_driver.py)."""

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agents.link import DaemonLink
from agents.metricsmessages import METRICS_MESSAGE_BYTES, metrics_messages
from agents.protocol import (
    MAX_POINTS_PER_MESSAGE,
    AgentMessage,
    AliveMessage,
    CancelMessage,
    FinishedMessage,
    HeartbeatMessage,
    Hello,
    MetricsMessage,
    PauseMessage,
    ResumeMessage,
    ShareMessage,
    encode,
)
from bench.agent_driver import Router


@pytest.fixture
def router(tmp_path: Path) -> Iterator[Router]:
    router = Router(tmp_path / "agents.sock")
    yield router
    router.close()


def until(condition: Callable[[], object], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not within the timeout"
        time.sleep(0.01)


def received(router: Router, count: int) -> list[AgentMessage]:
    """The next `count` messages, in the order they came."""
    messages: list[AgentMessage] = []
    for _ in range(count):
        message = router.next(5.0)
        assert message is not None, f"{len(messages)} of {count} came"
        messages.append(message)
    return messages


def hello(iteration: int) -> Hello:
    return Hello(job="j", gen=1, pid=1, state="running", iteration=iteration)


def test_messages_go_out_in_order_stamped_and_built_on_the_links_thread(
    router: Router, capfd: pytest.CaptureFixture[str]
) -> None:
    link = DaemonLink("j", router.endpoint)
    built_on: list[str] = []

    def heartbeat() -> list[HeartbeatMessage]:
        built_on.append(threading.current_thread().name)
        return [
            HeartbeatMessage(
                job="j", gen=1, iteration=2, samples=8, idle_s=0.1, step_s=0.9,
                samples_per_s=8.0, workers=1,
            )
        ]  # fmt: skip

    def broken() -> list[HeartbeatMessage]:
        raise ValueError("a bug in a message's builder")

    before = time.time()
    link.send(hello(1))
    link.send_built(broken)  # lost, with a traceback, but the link goes on
    link.send_built(heartbeat)
    link.send(FinishedMessage(job="j", gen=1, iteration=3))
    got = received(router, 3)
    assert [type(message) for message in got] == [Hello, HeartbeatMessage, FinishedMessage]
    assert [getattr(message, "iteration", None) for message in got] == [1, 2, 3]
    assert all(before <= message.ts <= time.time() for message in got), "stamped when posted"
    assert built_on == ["stoker-link-j"], "built on the link's thread, not the caller's"
    assert "ValueError: a bug in a message's builder" in capfd.readouterr().err
    link.close()


def test_a_boundary_reads_one_flag_and_the_stop_share_and_resume_are_sorted(
    router: Router,
) -> None:
    link = DaemonLink("j", router.endpoint)
    link.send(hello(0))
    router.expect(Hello, timeout_s=5)  # the ROUTER knows the DEALER's identity from here on
    assert not link.attention and link.next_stop() is None and link.take_share() is None
    router.send("j", ResumeMessage(job="j", gen=1, workers_per_gpu=2))  # while running: nothing
    router.send("j", ShareMessage(job="j", gen=1, decoder_share=0.25))
    router.send("j", PauseMessage(job="j", gen=2))
    router.send("j", CancelMessage(job="j", gen=2))
    stops: list[object] = []

    def paused() -> bool:  # as boundaries do: look when the flag is up, until the pause came
        if link.attention:
            stops.append(link.next_stop())
        return bool(stops) and isinstance(stops[-1], PauseMessage)

    until(paused)
    assert [type(stop) for stop in stops if stop is not None] == [PauseMessage], "resume: nothing"
    assert link.take_share() == 0.25 and link.take_share() is None, "taken once"
    until(lambda: isinstance(link.next_stop(), CancelMessage))
    assert link.next_stop() is None and not link.attention
    link.close()


def test_a_live_share_during_a_pause_is_dropped_for_the_resumes_own(router: Router) -> None:
    link = DaemonLink("j", router.endpoint)
    link.send(hello(0))
    router.expect(Hello, timeout_s=5)
    router.send("j", ShareMessage(job="j", gen=1, decoder_share=0.25))  # sent while running
    router.send("j", ResumeMessage(job="j", gen=2, workers_per_gpu=1, decoder_share=0.5))
    resume = link.wait_for_resume()
    assert resume is not None and resume.decoder_share == 0.5
    assert link.take_share() is None, "the older live share does not undo the resume's"
    link.close()


def test_a_malformed_message_from_the_daemon_is_skipped(
    router: Router, capfd: pytest.CaptureFixture[str]
) -> None:
    link = DaemonLink("j", router.endpoint)
    link.send(hello(0))
    router.expect(Hello, timeout_s=5)
    bad = b'{"type": "pause", "job": "j", "gen": "two"}'
    router.socket.send_multipart([router.identities["j"], bad])
    router.send("j", PauseMessage(job="j", gen=3))
    until(lambda: link.attention)
    until(lambda: isinstance(link.next_stop(), PauseMessage))
    assert "a message from the daemon was refused: pause.gen" in capfd.readouterr().err
    link.send(hello(1))  # the link goes on
    assert router.expect(Hello, timeout_s=5).iteration == 1
    link.close()


def test_a_restarted_daemon_is_noticed_once_and_a_paused_job_says_hello_to_it(
    tmp_path: Path,
) -> None:
    router = Router(tmp_path / "agents.sock")
    link = DaemonLink("j", router.endpoint)
    link.send(hello(0))
    router.expect(Hello, timeout_s=5)
    assert not link.reconnected(), "the first connection is no reconnection"
    router.close()
    router = Router(tmp_path / "agents.sock")  # a new daemon on the same socket
    try:
        until(lambda: link.attention)
        assert link.reconnected() and not link.reconnected()
        router.close()
        router = Router(tmp_path / "agents.sock")  # and again, while the job waits paused
        said: list[str] = []

        def say_hello() -> None:
            said.append("hello")
            link.send(Hello(job="j", gen=1, pid=1, state="paused", iteration=5))

        waiting = threading.Thread(target=lambda: said.append(str(link.wait_for_resume(say_hello))))
        waiting.start()
        assert router.expect(Hello, timeout_s=5).state == "paused", (
            "the new daemon learns the job is paused"
        )
        router.send("j", ResumeMessage(job="j", gen=2, workers_per_gpu=1))
        waiting.join(timeout=5)
        assert said[0] == "hello" and "workers_per_gpu=1" in said[1]
    finally:
        link.close()
        router.close()


def test_closing_gets_every_queued_message_out(router: Router) -> None:
    link = DaemonLink("j", router.endpoint)
    for iteration in range(500):
        link.send(hello(iteration))
    link.close()
    link.close()  # twice is fine
    assert [getattr(message, "iteration", None) for message in received(router, 500)] == list(
        range(500)
    )
    with pytest.raises(RuntimeError, match="closed"):
        link.send(hello(0))


def test_metrics_go_in_messages_under_the_size_limit_every_point_once_in_order() -> None:
    wide = {f"metric_{index:02d}_{'x' * 60}": float(index) for index in range(40)}
    rows = [(step, wide | {"": 1.0, "note": "text"}) for step in range(3 * MAX_POINTS_PER_MESSAGE)]
    messages = list(metrics_messages("j", 1, rows))
    assert all(len(encode(message)) <= METRICS_MESSAGE_BYTES for message in messages)
    points = [point for message in messages for point in message.points]
    steps = [step for step in range(3 * MAX_POINTS_PER_MESSAGE) for _ in range(2)]
    assert [point.step for point in points] == steps, "a step's 40 numbers in 2 points"
    assert [len(point.values) for point in points[:2]] == [32, 8], "a point holds 32"
    assert {name for point in points[:2] for name in point.values} == {
        name[:64] for name in wide
    }, "every number kept (strings and unnamed ones are not), names cut to 64 characters"
    small = list(metrics_messages("j", 1, [(step, {"loss": 0.5}) for step in range(1500)]))
    assert sum(len(message.points) for message in small) == 1500
    assert len(small) == 3, "1,000 points of a loss are 36 KiB: halved to fit, not cut finer"
    assert isinstance(small[0], MetricsMessage) and list(metrics_messages("j", 1, [])) == []


def test_the_links_own_thread_says_alive_with_the_phase_while_the_caller_is_busy(
    router: Router, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STOKER_PROTOCOL", "10")  # a daemon that reads it launched the job
    link = DaemonLink("j", router.endpoint, alive_every_s=0.1, phase="setup")
    try:
        time.sleep(0.35)  # the caller sends nothing: a long setup
        said = []
        while (message := router.next(0.0)) is not None:
            said.append(message)
        assert len(said) >= 2
        assert all(isinstance(m, AliveMessage) and m.phase == "setup" for m in said)
        link.set_phase("evaluation")  # said at once, not only at the next period
        deadline, phases = time.monotonic() + 0.08, []
        while (message := router.next(max(0.0, deadline - time.monotonic()))) is not None:
            assert isinstance(message, AliveMessage)
            phases.append(message.phase)
        assert phases[-1:] == ["evaluation"]
    finally:
        link.close()


def test_a_daemon_older_than_alive_is_sent_none(
    router: Router, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STOKER_PROTOCOL", "9")
    link = DaemonLink("j", router.endpoint, alive_every_s=0.05)
    try:
        link.set_phase("evaluation")
        assert router.next(0.3) is None  # it would refuse a message type it does not know
    finally:
        link.close()


def test_a_script_changing_phase_every_step_sends_a_few_the_newest_last(
    router: Router, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STOKER_PROTOCOL", "10")
    link = DaemonLink("j", router.endpoint, alive_every_s=0.1)
    try:
        for step in range(1000):  # `with job.phase(...)` around every step, say
            link.set_phase(f"phase {step % 2}")
        link.set_phase("done")
        time.sleep(0.6)
        said = []
        while (message := router.next(0.0)) is not None:
            assert isinstance(message, AliveMessage)
            said.append(message.phase)
        assert len(said) < 20, said  # not a thousand
        assert "done" in said
    finally:
        link.close()
