"""A job's output over REST: its logs (`GET /v1/jobs/{id}/logs`), read from the files its
processes write under `<state dir>/jobs/<id>/`, and the metrics its script reported with
`job.report` (`GET /v1/jobs/{id}/metrics`), which the daemon stores. A tenant reads its
own jobs only."""

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import PlainTextResponse, StreamingResponse

from daemon.auth import Daemon, Who, visible_job
from daemon.continuing import lineage, one_series
from daemon.jobfiles import read_end, read_from
from daemon.launcher import EARLIER_HEADER, log_file
from daemon.sinks import STDERR_TAG, STDOUT_TAG
from daemon.stopping import streaming

router = APIRouter(prefix="/v1")

_FOLLOW_POLL_S = 0.25
_TAIL_BYTES = 4 * 2**20  # a tail reads at most the log's last 4 MiB
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


@router.get("/jobs/{job_id}/logs", response_class=PlainTextResponse)
async def logs(
    job_id: str,
    who: Who,
    service: Daemon,
    request: Request,
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
    lines, offset = tail_lines(path, tail + 1)  # one more: whether lines come before them
    if stream == "all" and not lines:  # a job an older daemon started: one stream, then the other
        lines = _untimed(job_dir, rank, tail + 1)
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
            chunk, position = _read_from(path, position)
            for line in chunk:
                yield label(line)
            if ended or not streaming(request):
                return
            await asyncio.sleep(_FOLLOW_POLL_S)

    return StreamingResponse(lines_as_written(), media_type="text/plain", headers=earlier)


@router.get("/jobs/{job_id}/metrics")
async def metrics(
    job_id: str,
    who: Who,
    service: Daemon,
    points: Annotated[int, Query(ge=1, le=100_000)] = 1000,
) -> dict[str, Any]:
    """What the job's script reported with `job.report`, as one series per metric of
    [step, value] (null for NaN or infinity), evenly thinned to at most `points` each (the
    newest always kept); the newest values; and each series' stored stride (1 until a long
    run is downsampled, daemon/reported.py)."""
    visible_job(service, who, job_id)
    chain = lineage(service.store, job_id)  # a resumed job's series goes on from its own
    stored = one_series([service.store.reported.series(job.id) for job in chain])
    return {
        "job": job_id,
        "series": {
            name: _thin([[step, value] for step, value in found.points], points)
            for name, found in stored.items()
        },
        "newest": {name: found.points[-1][1] for name, found in stored.items()},
        "stride": {name: found.stride for name, found in stored.items()},
    }


def _thin(values: list[list[Any]], points: int) -> list[list[Any]]:
    """`points` of `values`, evenly spread, the newest always among them (and the first,
    from 2 points on)."""
    count = len(values)
    if count <= points:
        return values
    if points == 1:
        return values[-1:]
    # Spread over the span: n > points makes the indices strictly increasing.
    return [values[round(i * (count - 1) / (points - 1))] for i in range(points)]


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


def _read_from(path: Path, offset: int) -> tuple[list[str], int]:
    """Whole lines written after `offset`, and the offset after them; from the start of a
    log that was cut since (it is shorter than `offset`)."""
    data, size = read_from(path, offset)
    if size < offset:
        offset = 0
    end = data.rfind(b"\n") + 1
    text = data[:end].decode("utf-8", errors="replace")
    return text.splitlines(), offset + end


class _Gone:
    state = "failed"


_GONE = _Gone()
