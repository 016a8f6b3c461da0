"""A job's output over REST: its logs (`GET /v1/jobs/{id}/logs`), read from the files its
processes write under `<state dir>/jobs/<id>/`, and the metrics its script reported with
`job.report` (`GET /v1/jobs/{id}/metrics`), which the daemon stores. A tenant reads its
own jobs only."""

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import PlainTextResponse, StreamingResponse

from daemon.auth import Daemon, Who, visible_job
from daemon.continuing import lineage
from daemon.jobfiles import open_checked, read_end
from daemon.launcher import EARLIER_HEADER, log_file
from daemon.metricpages import MAX_SERIES, metrics_page
from daemon.sinks import STDERR_TAG, STDOUT_TAG
from daemon.stopping import streaming
from daemon.streamcaps import Streams

router = APIRouter(prefix="/v1")

_FOLLOW_POLL_S = 0.25
_TAIL_BYTES = 4 * 2**20  # a tail reads at most the log's last 4 MiB
# A follow reads this much at a time, off the event loop, and never falls further behind a
# log's end than _TAIL_BYTES: a job that grew its log to 2 GB at once (a sparse file) took
# the daemon to 4.3 GB read whole (issue 37, finding 5).
_CHUNK = 64 * 2**10
_FINAL = ("completed", "failed", "cancelled")


def tail_lines(path: Path, lines: int) -> tuple[list[str], int]:
    """The last `lines` lines of a log (reaching into the part cut off last, `<name>.1`,
    when the log was cut lately: daemon/logcap.py) and the offset its end had."""
    text, size = _tail_text(path)
    found = text.splitlines()
    if len(found) < lines:
        earlier, _ = _tail_text(path.with_name(path.name + ".1"))
        found = earlier.splitlines() + found
    return found[-lines:] if lines else [], size


def _tail_text(path: Path) -> tuple[str, int]:
    data, size = read_end(path, _TAIL_BYTES)
    return data.decode("utf-8", errors="replace"), size


async def _follow_slot(who: Who, request: Request, follow: bool = False) -> AsyncIterator[None]:
    """One of the caller's log follows (when it asks to follow), held until its response
    ends: `limits.max_follows_per_tenant` a tenant, `limits.max_follows` the node."""
    if not follow:
        yield
        return
    follows: Streams = request.app.state.follows
    with follows.held(who):
        yield


@router.get("/jobs/{job_id}/logs", response_class=PlainTextResponse)
async def logs(
    job_id: str,
    who: Who,
    service: Daemon,
    request: Request,
    _slot: Annotated[None, Depends(_follow_slot)],
    *,
    stream: Annotated[
        Literal["all", "stdout", "stderr"],
        Query(description="all: both, in the order they were written (stderr's lines say so)"),
    ] = "all",
    rank: Annotated[int, Query(ge=0, le=1023)] = 0,
    tail: Annotated[int, Query(ge=0, le=100_000)] = 100,
    follow: bool = False,
) -> Any:
    """The last `tail` lines of one rank's output, each `[rank N]`-prefixed: both streams in
    the order they were written, a stderr line `[rank N stderr]`-prefixed (`stream=all`), or
    one stream (the header X-Earlier-Lines says when lines came before them); with
    `follow`, then every new line as it is written, until the job ends and its processes
    have exited."""
    visible_job(service, who, job_id)
    job_dir = service.launcher.jobs_dir / job_id
    path = log_file(job_dir, "stdall" if stream == "all" else stream, rank)
    lines, offset = await asyncio.to_thread(tail_lines, path, tail + 1)  # one more: whether
    if stream == "all" and not lines:  # lines come before them; an older daemon's job:
        lines = await asyncio.to_thread(_untimed, job_dir, rank, tail + 1)  # one, then the other
    label = _labels(rank, tagged=stream == "all")
    earlier = {EARLIER_HEADER: "1"} if len(lines) > tail else {}
    shown = lines[-tail:] if tail else []
    head = "".join(label(line) for line in shown)
    if not follow:
        return PlainTextResponse(head, headers=earlier)

    async def lines_as_written() -> AsyncIterator[str]:
        yield head
        position = offset
        while True:
            # A completed script may go on after its final step (an evaluation, a save):
            # its output is followed until its processes are gone.
            final = (service.store.job(job_id) or _GONE).state in _FINAL
            ended = final and not service.launcher.running(job_id)
            read = await asyncio.to_thread(read_lines, path, position)
            position = read.offset
            if read.skipped:
                yield f"[stoker: {read.skipped} bytes skipped: written faster than read]\n"
            for line in read.lines:
                yield label(line)
            if read.more and streaming(request):
                continue  # the log's end is further on: read on before waiting
            if ended or not streaming(request):
                return
            await asyncio.sleep(_FOLLOW_POLL_S)

    return StreamingResponse(lines_as_written(), media_type="text/plain", headers=earlier)


@router.get("/jobs/{job_id}/metrics")
async def metrics(
    job_id: str,
    who: Who,
    service: Daemon,
    *,
    points: Annotated[int, Query(ge=1, le=100_000)] = 1000,
    after: Annotated[
        str | None, Query(max_length=400, description="the `next` of the page before")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_SERIES, description="series a page holds")] = (
        MAX_SERIES
    ),
) -> Response:
    """What the job's script reported with `job.report`, as one series per metric of
    [step, value] (null for NaN or infinity), evenly thinned to at most `points` each (the
    newest always kept); the newest values; and each series' stored stride (1 until a long
    run is downsampled, daemon/reported.py). `limit` series a page, by name; `next` (and
    the header X-Next-Cursor) is the `after` of the next page, null on the last."""
    visible_job(service, who, job_id)
    chain = [job.id for job in lineage(service.store, job_id)]  # a resumed job's series
    body, following = await asyncio.to_thread(  # goes on from its own
        metrics_page, service.store.path, chain, after, limit, points
    )
    headers = {"X-Next-Cursor": following} if following is not None else {}
    return Response(body, media_type="application/json", headers=headers)


def _labels(rank: int, *, tagged: bool) -> Callable[[str], str]:
    """How a log's line is served: `[rank N] ` before it; from the interleaved log, by its
    tag (daemon/logsink.py), `[rank N stderr] ` before a stderr line."""
    plain, errors = f"[rank {rank}] ", f"[rank {rank} stderr] "

    def label(line: str) -> str:
        if not tagged:
            return f"{plain}{line}\n"
        if line.startswith(STDERR_TAG):
            return f"{errors}{line.removeprefix(STDERR_TAG)}\n"
        return f"{plain}{line.removeprefix(STDOUT_TAG)}\n"

    return label


def _untimed(job_dir: Path, rank: int, lines: int) -> list[str]:
    """Both streams of a rank with no interleaved log, tagged: its stdout, then its
    stderr."""
    found = []
    for stream, tag in (("stdout", STDOUT_TAG), ("stderr", STDERR_TAG)):
        kept, _ = tail_lines(log_file(job_dir, stream, rank), lines)
        found += [tag + line for line in kept]
    return found[-lines:]


@dataclass(frozen=True)
class Read:
    """What one read of a followed log gave: its whole lines, the offset after them, the
    bytes jumped over to stay within _TAIL_BYTES of its end, and whether more follow."""

    lines: list[str]
    offset: int
    skipped: int
    more: bool


def read_lines(path: Path, offset: int) -> Read:
    """Whole lines written after `offset`, _CHUNK bytes at most (a line longer than that is
    served in pieces); from the start of a log that was cut since (it is shorter than
    `offset`), and from _TAIL_BYTES before its end when `offset` is further back."""
    try:
        descriptor = open_checked(path, os.O_RDONLY)
    except OSError:  # missing, unsafe or unreadable: an empty log, as jobfiles reads it
        return Read([], offset, 0, more=False)
    try:
        size = os.fstat(descriptor).st_size
        if size < offset:
            offset = 0
        skipped = max(0, size - _TAIL_BYTES - offset)
        offset += skipped
        data = os.pread(descriptor, min(_CHUNK, size - offset), offset)
    finally:
        os.close(descriptor)
    end = data.rfind(b"\n") + 1 or (len(data) if len(data) == _CHUNK else 0)
    text = data[:end].decode("utf-8", errors="replace")
    return Read(text.splitlines(), offset + end, skipped, more=offset + end < size and end > 0)


class _Gone:
    state = "failed"


_GONE = _Gone()
