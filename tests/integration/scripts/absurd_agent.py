"""A job's process that speaks the agent protocol itself, no SDK: it has its launch's
$STOKER_CONTROL and secret, says hello, then sends heartbeats with absurd numbers
(issue 37, finding 1: samples of 10^18, seconds and rates of 1e308, a literal Infinity,
an iteration of 2^64) for SECONDS, then exits 0 without a word more. Argument: SECONDS."""

import json
import os
import secrets
import sys
import time
from typing import Any

import zmq

job, gen = os.environ["STOKER_JOB_ID"], int(os.environ["STOKER_GEN"])
secret = os.environ.get("STOKER_AGENT_SECRET", "")
context = zmq.Context()
socket = context.socket(zmq.DEALER)
socket.setsockopt(zmq.IDENTITY, f"{job}@{secrets.token_hex(8)}".encode())
socket.setsockopt(zmq.LINGER, 1000)
socket.connect(os.environ["STOKER_CONTROL"])


def send(text: str) -> None:
    socket.send(text.encode())


head = {"job": job, "gen": gen, "secret": secret}
workers = int(os.environ.get("STOKER_WORKERS", "1"))
send(json.dumps({"type": "hello", **head, "pid": os.getpid(), "state": "running"}))
beat = {"type": "heartbeat", **head, "workers": workers, "step_s": 1.0}
absurd: list[dict[str, Any]] = [
    {"iteration": 5, "samples": 10**18, "idle_s": 1e308, "step_s": 1e308, "samples_per_s": 1e308},
    {"iteration": 6, "samples": 64, "idle_s": "INF", "samples_per_s": 64.0},
    {"iteration": 2**64, "samples": 64, "idle_s": 0.1, "samples_per_s": 64.0},
]
print("absurd: speaking", flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for numbers in absurd:
        send(json.dumps({**beat, **numbers}).replace('"INF"', "Infinity"))
    # Its link's word that it lives, so that it is not taken for lost meanwhile.
    send(json.dumps({"type": "alive", **head, "phase": "training", "iteration": 5}))
    time.sleep(0.2)
print("absurd: done", flush=True)
