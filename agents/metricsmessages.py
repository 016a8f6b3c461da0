"""What a script reported (`job.report`), as the protocol's `metrics` messages: numbers
only, names cut to the protocol's limits, each message under its size limit. The SDK's
link to the daemon (agents/control.py) has them built on the link's own thread, so that
building them costs the training loop nothing.
"""

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from agents.agentmessages import (
    MAX_METRIC_NAME,
    MAX_METRICS_PER_POINT,
    MAX_POINTS_PER_MESSAGE,
    MetricsMessage,
)
from agents.protocol import MAX_MESSAGE_BYTES, encode

METRICS_MESSAGE_BYTES = MAX_MESSAGE_BYTES // 2  # room for the envelope


def metrics_messages(
    job_id: str, gen: int, rows: Sequence[tuple[int, Mapping[str, Any]]]
) -> Iterator[MetricsMessage]:
    """Reported rows as `metrics` messages (numbers only; names cut to the protocol's
    limits; a step of more names than a point holds in several points), each under the
    protocol's size limit. Validated a message at a time, not a point at a time: 500
    points take 0.3 ms, not 2 (the link's thread holds the GIL meanwhile, and the training
    loop waits for it)."""
    points = []
    for step, values in rows:
        numbers = [
            (name[:MAX_METRIC_NAME], float(value))
            for name, value in values.items()
            if isinstance(value, int | float) and name
        ]
        for start in range(0, len(numbers), MAX_METRICS_PER_POINT):
            points.append(
                {"step": step, "values": dict(numbers[start : start + MAX_METRICS_PER_POINT])}
            )
    for start in range(0, len(points), MAX_POINTS_PER_MESSAGE):
        yield from _fitting(job_id, gen, points[start : start + MAX_POINTS_PER_MESSAGE])


def _fitting(job_id: str, gen: int, points: list[dict[str, Any]]) -> Iterator[MetricsMessage]:
    """`points` in one message, or halved until each part fits (one point always does:
    32 names of 64 characters are a few KiB)."""
    message = MetricsMessage.model_validate({"job": job_id, "gen": gen, "points": points})
    if len(points) == 1 or len(encode(message)) <= METRICS_MESSAGE_BYTES:
        yield message
    else:
        half = len(points) // 2
        yield from _fitting(job_id, gen, points[:half])
        yield from _fitting(job_id, gen, points[half:])
