"""The daemon's ROUTER (daemon/agentlink.py) over real ZeroMQ sockets: which connection a job
is answered on when other processes connect under its name."""

import asyncio
from pathlib import Path

import zmq

from agents.protocol import (
    AgentMessage,
    HeartbeatMessage,
    Hello,
    PauseMessage,
    connection_identity,
    decode_daemon,
    encode,
    speaks_for,
)
from daemon.agentlink import AgentLink

SECRET = "the-launchs-secret"


def trusted(message: AgentMessage) -> bool:
    return message.secret == SECRET


def dealer(
    context: zmq.Context[zmq.Socket[bytes]], link: AgentLink, identity: bytes
) -> zmq.Socket[bytes]:
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.IDENTITY, identity)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(link.endpoint)
    return socket


def paused(socket: zmq.Socket[bytes]) -> bool:
    """Whether the daemon's pause reached this connection within a second."""
    if not socket.poll(1000, zmq.POLLIN):
        return False
    return isinstance(decode_daemon(socket.recv()), PauseMessage)


def test_identities_carry_a_nonce_and_speak_for_their_job_only() -> None:
    first, second = connection_identity("job-1"), connection_identity("job-1")
    assert first != second and first.startswith(b"job-1@")
    assert speaks_for(first, "job-1") and speaks_for(b"job-1", "job-1")  # an older SDK's
    assert not speaks_for(first, "job-12") and not speaks_for(b"job-1@x", "job-1")
    assert not speaks_for(connection_identity("job-12"), "job-1")


def test_no_other_connection_takes_a_jobs_route(tmp_path: Path) -> None:
    link = AgentLink(tmp_path / "agents.sock", trusted=trusted)
    link.bind()
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    heartbeat = HeartbeatMessage(job="j", gen=1, iteration=1, samples=32, idle_s=0.0,
                                 step_s=0.1, samples_per_s=320.0, workers=1)  # fmt: skip

    async def exchange() -> list[bool]:
        reached = []
        agent = dealer(context, link, connection_identity("j"))
        reached.append(not await link.send(PauseMessage(job="j", gen=1)))  # not heard yet
        agent.send(encode(Hello(job="j", pid=1, secret=SECRET)))
        assert await link.receive(timeout_s=2.0) is not None
        own = agent.getsockopt(zmq.IDENTITY)
        assert isinstance(own, bytes)
        # A process under the job's bare id, and one under the agent's very identity.
        for identity in (b"j", own):
            rogue = dealer(context, link, identity)
            rogue.send(encode(heartbeat))  # without the secret: heard, never trusted
            await link.receive(timeout_s=0.5)
            rogue.close()
            await asyncio.sleep(0.2)
            assert await link.send(PauseMessage(job="j", gen=2))
            reached.append(paused(agent))
        # A relaunch while the old connection lingers (an orphaned worker holds it).
        relaunched = dealer(context, link, connection_identity("j"))
        relaunched.send(encode(Hello(job="j", pid=2, secret=SECRET)))
        assert await link.receive(timeout_s=2.0) is not None
        assert await link.send(PauseMessage(job="j", gen=3))
        reached += [paused(relaunched), not paused(agent)]
        link.forget("j")  # it left: answered nowhere, not on a bare id a rogue may hold
        bare = dealer(context, link, b"j")
        bare.send(encode(heartbeat))
        await link.receive(timeout_s=0.5)
        reached += [not await link.send(PauseMessage(job="j", gen=4)), not paused(bare)]
        for socket in (agent, relaunched, bare):
            socket.close()
        return reached

    try:
        assert asyncio.run(exchange()) == [True] * 7
    finally:
        link.close()
        context.destroy(linger=0)  # a failed exchange leaves its sockets open
