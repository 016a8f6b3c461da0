"""When a running job will be done: the iterations it has left, at the pace of its
heartbeats over the last minute (pauses in that minute included, so a job the planner keeps
moving is not promised the pace of its best seconds)."""

from collections import deque

WINDOW_S = 60.0  # the heartbeats whose pace counts
MIN_SPAN_S = 5.0  # fewer seconds of them say too little to promise a time


class Pace:
    """Each job's (time, iteration) over the last `window_s` of its heartbeats, on the
    daemon's clock."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self._window_s = window_s
        self._seen: dict[str, deque[tuple[float, int]]] = {}

    def saw(self, job_id: str, now: float, iteration: int) -> None:
        seen = self._seen.setdefault(job_id, deque())
        if seen and iteration < seen[-1][1]:
            seen.clear()  # relaunched from a checkpoint: its pace starts again
        seen.append((now, iteration))
        # Keep one heartbeat at or past the window's start, so the span is a full window.
        while len(seen) > 2 and now - seen[1][0] >= self._window_s:
            seen.popleft()

    def seconds_left(self, job_id: str, total: int) -> float | None:
        """Seconds until iteration `total` at its recent pace, as of its last heartbeat;
        None before it has `MIN_SPAN_S` of heartbeats that made progress."""
        seen = self._seen.get(job_id)
        if not seen:
            return None
        (then, first), (now, last) = seen[0], seen[-1]
        if now - then < MIN_SPAN_S or last <= first:
            return None
        return max(0, total - last) * (now - then) / (last - first)

    def forget(self, job_id: str) -> None:
        self._seen.pop(job_id, None)
