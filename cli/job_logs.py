"""`stoker logs`, and the following of a job's logs that it and `submit --follow` share:
each of the job's streams copied to ours as the daemon streams it (a thread each), the
launcher's relaunch marks said once, and with `-f` how the job ended (its reason, without
the stderr tail just shown again) and an exit status scripts can test."""

import os
import signal
import sys
import textwrap
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from cli.common import fail
from cli.connection import Daemon, StateDir, Token, Url, detail
from cli.job_state import after_end

if TYPE_CHECKING:  # imported when a command runs: `stoker serve` does not load it
    import httpx

# Exit status of `submit --follow` and `logs -f` when the job they followed failed or was
# cancelled (2 is for input to fix, as everywhere in the CLI).
JOB_DID_NOT_COMPLETE = 1


def logs(
    job_id: Annotated[str, typer.Argument(metavar="ID")],
    *,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="until the job ends; exit 1 unless it completed")
    ] = False,
    stdout: Annotated[bool, typer.Option("--stdout", help="its stdout only")] = False,
    stderr: Annotated[bool, typer.Option("--stderr", help="its stderr only")] = False,
    rank: Annotated[int, typer.Option(help="which rank's")] = 0,
    tail: Annotated[int, typer.Option(help="lines from the end")] = 100,
    url: Url = None,
    token: Token = None,
    state_dir: StateDir = None,
) -> None:
    """Print a job's output as it would show in a terminal: its stdout here on stdout and
    its stderr on stderr, in the order it wrote them (or one of them), and with -f what it
    writes next."""
    if stdout and stderr:
        fail("--stdout and --stderr: give one of them, or neither for both")
    streams = ("stdout",) if stdout else ("stderr",) if stderr else _STREAMS
    follow_job(Daemon(url, token, state_dir), job_id, streams=streams, rank=rank, tail=tail,
            until_end=follow)  # fmt: skip


_STREAMS = ("all",)  # both, in the order the job wrote them
_SHOWN_LINES = 100  # more than a reason quotes of a stderr (daemon/exitreason.py)


def follow_job(
    daemon: Daemon,
    job_id: str,
    *,
    streams: Sequence[str] = _STREAMS,
    rank: int = 0,
    tail: int = 100,
    until_end: bool = True,
) -> None:
    """Copy each of the job's `streams` to ours of the same name, the streams side by side
    (a thread each); with `until_end`, then say how the job ended, and exit 1 unless it
    completed."""
    copying = _Copying(daemon, job_id, streams, rank=rank, tail=tail, follow=until_end)
    copying.run()
    if copying.closed:
        _exit_as_cat(copying.closed)
    if copying.failures:
        fail(copying.failures[0])
    if until_end:
        _say_how_it_ended(daemon, job_id, list(copying.shown))


class _Copying:
    """The threads copying a job's streams here, one each, and what they met on the way:
    a log that could not be read, a stream of ours whose reader went away, and the last
    lines of rank `rank`'s stderr as copied here."""

    def __init__(
        self,
        daemon: Daemon,
        job_id: str,
        streams: Sequence[str],
        *,
        rank: int,
        tail: int,
        follow: bool,
    ) -> None:
        self.daemon, self.job_id, self.streams = daemon, job_id, streams
        self.rank, self.tail, self.follow = rank, tail, follow
        self.failures: list[str] = []
        self.closed: list[str] = []  # our streams whose reader went away
        # The last lines of rank `rank`'s stderr as copied here, which a failure's reason
        # need not show again.
        self.shown: deque[str] = deque(maxlen=_SHOWN_LINES)
        # A relaunch's "started again" line is in each log that holds output: said once, by
        # whichever stream copies it first.
        self._marks: set[str] = set()
        self._marks_lock = threading.Lock()

    def run(self) -> None:
        """Copy every stream until each ends or one of ours is closed; Ctrl-C stops
        following (the job runs on) with status 130."""
        copiers = [
            threading.Thread(target=self._copy, args=(stream,), daemon=True)
            for stream in self.streams
        ]
        for copier in copiers:
            copier.start()
        try:
            for copier in copiers:
                while copier.is_alive() and not self.closed:
                    copier.join(timeout=0.2)  # a join without a timeout would not see Ctrl-C
        except KeyboardInterrupt:
            job_id = self.job_id
            said = f"stopped following {job_id}, which runs on: `stoker logs {job_id} -f` follows"
            typer.echo(f"\n{said} it again, `stoker cancel {job_id}` stops it", err=True)
            raise typer.Exit(130) from None

    def _first_time(self, line: str) -> bool:
        with self._marks_lock:
            seen = line in self._marks
            self._marks.add(line)
            return not seen

    def _copy(self, stream: str) -> None:
        once = self._first_time if len(self.streams) > 1 else None
        kept = self.shown if stream in ("stderr", "all") else None
        try:
            _copy_log(
                self.daemon,
                self.job_id,
                stream,
                rank=self.rank,
                tail=self.tail,
                follow=self.follow,
                once=once,
                shown=kept,
            )
        except _LogUnreadable as error:  # said once, by the main thread
            self.failures.append(str(error))
        except BrokenPipeError:  # `stoker logs ID | head`: the reader has what it wanted
            self.closed.append(stream)


def _exit_as_cat(closed: Sequence[str]) -> NoReturn:
    """Exit quietly, with `cat`'s status (128 + SIGPIPE): the reader of our `closed`
    streams went away."""
    for stream in closed:
        quiet = os.open(os.devnull, os.O_WRONLY)  # the interpreter's last flush finds it
        os.dup2(quiet, (sys.stderr if stream == "stderr" else sys.stdout).fileno())
    raise typer.Exit(128 + signal.SIGPIPE)


def _say_how_it_ended(daemon: Daemon, job_id: str, shown: Sequence[str]) -> None:
    """Say how the followed job ended (and why, where it did not complete, without the
    stderr tail just `shown`); exit 1 unless it did its work."""
    job = daemon.call("GET", f"/v1/jobs/{job_id}")
    # A script that failed after its final step (its save) did not do its work either.
    ended_badly = job["state"] != "completed" or bool(job.get("failed_after_end"))
    if ended_badly and job.get("reason"):  # its exit code, and the daemon's hint if any
        why = _unrepeated(job["reason"], shown)
        typer.echo(textwrap.indent(f"why: {why}", "  "), err=True)
    said = job["state"] + after_end(job)
    typer.echo(f"{job_id}: {said}", err=True)  # the last line, for scripts
    if ended_badly:  # a script may go on only after a job that did its work
        raise typer.Exit(JOB_DID_NOT_COMPLETE)


def _unrepeated(reason: str, shown: Sequence[str]) -> str:
    """A failure's `reason` without the stderr tail it quotes when that tail is the last of
    what was `shown` (its lines as the job wrote them): the traceback just printed is not
    printed again. Anything else, a hint or why it is not relaunched, stays."""
    from daemon.exitreason import STDERR_ENDS  # noqa: PLC0415

    ended, found, quoted = reason.partition(STDERR_ENDS + "\n")
    if not found or reason.count(STDERR_ENDS) > 1 or ended.startswith("rank "):
        return reason  # no tail, or another rank's: what was shown is rank 0's
    lines = quoted.splitlines()
    said = [line for line in shown if line.strip()]  # a reason quotes no blank line
    for count in range(min(len(lines), len(said)), 0, -1):
        last = said[-count:]  # the quote's first line may be cut at its start
        if lines[1:count] == last[1:] and last[0].endswith(lines[0]):
            rest = "".join(f"\n{line}" for line in lines[count:])
            return f"{ended}; its stderr ends as shown above{rest}"
    return reason


def _copy_log(
    daemon: Daemon,
    job_id: str,
    stream: str,
    *,
    rank: int,
    tail: int,
    follow: bool,
    once: Callable[[str], bool] | None = None,
    shown: deque[str] | None = None,
) -> None:
    """Copy one log to our stream of its name; with `once`, each of the launcher's marks
    (the line a relaunch starts with) only where `once(line)` says it is new; with `shown`,
    keep the lines copied there too, as the job wrote them."""
    import httpx  # noqa: PLC0415

    from daemon.launcher import EARLIER_HEADER  # noqa: PLC0415

    params: dict[str, str | int | bool] = {
        "stream": stream,
        "rank": rank,
        "tail": tail,
        "follow": follow,
    }
    out = sys.stderr if stream == "stderr" else sys.stdout
    prefix, errors = f"[rank {rank}] ", f"[rank {rank} stderr] "  # `all`: its stderr's lines
    try:
        with daemon.http.stream(
            "GET", f"/v1/jobs/{job_id}/logs", params=params, timeout=None
        ) as reply:
            if reply.status_code >= 400:
                reply.read()
                raise _LogUnreadable(
                    f"GET /v1/jobs/{job_id}/logs: {reply.status_code} {detail(reply)}"
                )
            if tail and reply.headers.get(EARLIER_HEADER):  # said first, where it is seen
                what = "output" if stream == "all" else stream
                typer.echo(f"(its {what}: the last {tail} lines; --tail N shows more)", err=True)
            whole = once is None and shown is None and stream != "all"
            for text in reply.iter_text() if whole else _lines(reply, once):
                to, line = out, text
                if stream == "all" and text.startswith(errors):
                    to, line = sys.stderr, prefix + text.removeprefix(errors)
                to.write(line)
                to.flush()
                if shown is not None and (stream == "stderr" or to is sys.stderr):
                    shown.append(line.rstrip("\n").removeprefix(prefix))
    except httpx.TransportError as error:
        raise _LogUnreadable(
            f"no daemon at {daemon.url} ({error}); start one with `stoker serve`"
        ) from None


def _lines(reply: "httpx.Response", once: Callable[[str], bool] | None) -> Iterator[str]:
    """The reply's lines, each with its newline; with `once`, a launcher's mark only if
    `once` says so."""
    from daemon.launcher import AGAIN_MARK  # noqa: PLC0415

    for line in reply.iter_lines():
        if once is None or AGAIN_MARK not in line or once(line):
            yield line + "\n"


class _LogUnreadable(Exception):
    """A log could not be read: what to tell the user."""
