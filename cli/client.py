"""The CLI client of a running daemon: `stoker submit`, `stoker jobs`, `stoker logs`,
`stoker cancel` and `stoker dashboard` (`stoker show` and `stoker metrics` are in
cli/job_view.py); `Daemon`, the connection every client command uses.

The token: `--token`, else `STOKER_TOKEN`, else the admin token in the daemon's state dir,
which works on the daemon's own machine: `--state-dir`, else `STOKER_STATE_DIR`, else the
nearest `.stoker` (where `stoker serve` keeps its state by default) in this folder or one
above it, so a command run from a project's subfolder finds the daemon started at its top.
Where the daemon is: `--url`, else `STOKER_URL`, else the URL the daemon wrote into that
state dir (`daemon.url`, read only if it is this user's file: a daemon on another port is
found too; one this user cannot read stops the command, which asks for `--url`), else
http://127.0.0.1:8470.
"""

import json
import os
import pwd
import signal
import sys
import textwrap
import threading
import tomllib
import urllib.parse
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlencode

import typer

from cli.common import fail, print_json, read_text, signed_percent, span

if TYPE_CHECKING:  # imported when a command runs: `stoker serve` does not load it
    import httpx

DEFAULT_URL = "http://127.0.0.1:8470"

Url = Annotated[
    str | None,
    typer.Option(
        help="daemon URL [$STOKER_URL, else where the state dir's daemon said it listens,"
        f" else {DEFAULT_URL}]"
    ),
]
Token = Annotated[str | None, typer.Option(help="bearer token [$STOKER_TOKEN or admin.token]")]
StateDir = Annotated[
    Path | None,
    typer.Option(
        help="the daemon's state dir: its admin.token and the URL it listens on are read"
        " there [$STOKER_STATE_DIR or the nearest .stoker up]"
    ),
]
DEFAULT_STATE_DIR = ".stoker"
# Exit status of `submit --follow` and `logs -f` when the job they followed failed or was
# cancelled (2 is for input to fix, as everywhere in the CLI).
JOB_DID_NOT_COMPLETE = 1


JsonOut = typer.Option("--json", help="the whole job, as JSON")
Follow = typer.Option(
    "--follow", "-f", help="then print its logs until it ends; exit 1 unless it completed"
)


def register_client(app: typer.Typer) -> None:
    # `stoker submit -- python train.py --lr 0.1`: the command's own options pass through,
    # as after the command's first word even without `--`; a misspelt option of ours is
    # refused rather than run as the command.
    app.command(
        "submit", context_settings={"allow_extra_args": True, "allow_interspersed_args": False}
    )(submit)
    app.command("jobs")(jobs)
    app.command("logs")(logs)
    app.command("cancel")(cancel)
    app.command("resume")(resume)
    app.command("dashboard")(dashboard)


class Daemon:
    """A connection to a daemon that turns HTTP errors into messages a user can act on."""

    def __init__(self, url: str | None, token: str | None, state_dir: Path | None) -> None:
        found = _state_dir(state_dir)  # looked for once: the token and the URL are read there
        if token is not None:
            self.token, self.token_from = token, "--token"
        elif "STOKER_TOKEN" in os.environ:
            self.token, self.token_from = os.environ["STOKER_TOKEN"], "STOKER_TOKEN"
        else:
            path = admin_token_file(found)
            self.token, self.token_from = read_text(path, "token").strip(), str(path)
        chosen = url or os.environ.get("STOKER_URL")
        if chosen is None and found is not None:
            chosen = _url_of_running(found)
        self.url = chosen or DEFAULT_URL
        import httpx  # noqa: PLC0415 (the CLI imports what a command needs, when it runs)

        self.http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=30
        )

    def call(
        self, method: str, path: str, body: object = None, params: dict[str, Any] | None = None
    ) -> Any:
        """The reply's JSON; any error status fails the command, saying what came back."""
        return self._checked(method, path, self.request(method, path, body, params)).json()

    def _checked(self, method: str, path: str, reply: "httpx.Response") -> "httpx.Response":
        """`reply`, unless its status is an error: then the command fails, saying it (and
        for a 401, where the token came from)."""
        if reply.status_code == 401:
            hint = ""
            if self.token_from not in ("--token", "STOKER_TOKEN"):  # the state dir's file
                hint = "; a daemon with tokens configured takes one: --token or STOKER_TOKEN"
            fail(f"{method} {path}: 401 {detail(reply)} (token from {self.token_from}){hint}")
        if reply.status_code >= 400:
            fail(f"{method} {path}: {reply.status_code} {detail(reply)}")
        return reply

    def every_page(self, path: str, query: dict[str, Any] | None = None) -> list[Any]:
        """Every item of a paginated list (GET /v1/jobs) under `query`, following
        `X-Next-Cursor`."""
        items: list[Any] = []
        params: dict[str, Any] = dict(query or {})
        while True:
            reply = self._checked("GET", path, self.request("GET", path, params=params))
            items += reply.json()
            cursor = reply.headers.get("X-Next-Cursor")
            if cursor is None:
                return items
            params = {**(query or {}), "after": cursor}

    def request(
        self, method: str, path: str, body: object = None, params: dict[str, Any] | None = None
    ) -> "httpx.Response":
        """The reply, whatever its status; no daemon there fails the command."""
        import httpx  # noqa: PLC0415

        try:
            return self.http.request(method, path, json=body, params=params)
        except httpx.TransportError as error:
            fail(
                f"no daemon at {self.url} ({error}); start one with `stoker serve`, or say "
                "where it listens with --url or STOKER_URL"
            )


def _written_url(state_dir: Path) -> str | None:
    """The URL the daemon of `state_dir` wrote there (`daemon.url`), if it did and the file
    is this user's: a file someone else left in a folder above could name any host, and the
    token would go there."""
    from daemon.statelock import URL_FILE  # noqa: PLC0415 (`stoker --help` loads no daemon)

    if _url_file_closed(state_dir) is not None:
        return None
    try:
        return (state_dir / URL_FILE).read_text().strip() or None
    except OSError:  # absent
        return None


def _url_file_closed(state_dir: Path) -> str | None:
    """Why this user may not read the `daemon.url` in `state_dir` (whose it is, or that its
    folder is closed); None when it is absent or this user's to read."""
    from daemon.statelock import URL_FILE  # noqa: PLC0415

    path = state_dir / URL_FILE
    try:
        found = path.stat()
    except FileNotFoundError:
        return None
    except OSError:
        return "its folder is closed to this user"
    if found.st_uid == os.getuid() and os.access(path, os.R_OK):
        return None
    try:
        return f"it is {pwd.getpwuid(found.st_uid).pw_name}'s"
    except KeyError:
        return f"it is uid {found.st_uid}'s"


def _url_of_running(state_dir: Path) -> str | None:
    """The URL the daemon holding `state_dir` wrote there; None when there is none and
    whether a daemon holds it cannot be told (a lock file this user cannot read: the
    default URL is tried). Fails when no daemon holds it, or one holds it and gives no URL
    (starting or stopping): a stale `daemon.url`, or the default URL, may be another
    daemon's, which this state dir's token must not reach."""
    from daemon.statelock import daemon_holds  # noqa: PLC0415 (`stoker --help` loads no daemon)

    holds = daemon_holds(state_dir)
    if holds is False:
        fail(
            f"the daemon of {state_dir} is not running; start it with `stoker serve "
            f"--state-dir {state_dir}{_where_it_listened(state_dir)}`, or say where a daemon"
            " listens with --url or STOKER_URL"
        )
    written = _written_url(state_dir)
    if written is None and (why := _url_file_closed(state_dir)) is not None:
        fail(  # the default URL may be anyone's listener: the token must not go there
            f"this user cannot read {state_dir}/daemon.url ({why}), where its daemon says"
            " where it listens; give the daemon's address with --url or STOKER_URL"
        )
    if holds and written is None:
        fail(
            f"the daemon of {state_dir} has not said where it listens yet (starting or "
            "stopping); try again, or give --url or STOKER_URL"
        )
    return written


def _where_it_listened(state_dir: Path) -> str:
    """`stoker serve`'s options for the address a daemon of `state_dir` that did not stop
    cleanly (a kill -9 leaves its `daemon.url`) listened on, where not the default: its
    jobs' agents and the CLI's users expect it there."""
    written = _written_url(state_dir)
    if written is None:
        return ""
    address = urllib.parse.urlsplit(written)
    default = urllib.parse.urlsplit(DEFAULT_URL)
    options = ""
    if address.hostname not in (None, default.hostname):
        options += f" --host {address.hostname}"
    if address.port not in (None, default.port):
        options += f" --port {address.port}"
    return options


def _state_dir(state_dir: Path | None) -> Path | None:
    """`state_dir`, else $STOKER_STATE_DIR, else the nearest `.stoker` holding a token in
    this folder or one above it; None when none is found."""
    given = state_dir or os.environ.get("STOKER_STATE_DIR")
    if given:
        return Path(given)
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / DEFAULT_STATE_DIR / "admin.token").is_file():
            return folder / DEFAULT_STATE_DIR
    return None


def admin_token_file(state_dir: Path | None) -> Path:
    """The admin token's file: in `state_dir`, else in $STOKER_STATE_DIR, else in the
    nearest `.stoker` in this folder or one above it. Fails saying where it looked."""
    found = _state_dir(state_dir)
    if found is not None:
        path = found / "admin.token"
        if not path.is_file():
            fail(f"no token: {path} does not exist; give --token or STOKER_TOKEN, or the "
                 "daemon's state dir with --state-dir or STOKER_STATE_DIR")  # fmt: skip
        return path
    here = Path.cwd()
    fail(f"no token: no {DEFAULT_STATE_DIR}/admin.token in {here} or a folder above it; give "
         "--token or STOKER_TOKEN, or the daemon's state dir with --state-dir or "
         "STOKER_STATE_DIR")  # fmt: skip


def detail(reply: "httpx.Response") -> str:
    """What an error reply says, one line: `field: message; ...` for a 422."""
    try:
        detail = reply.json().get("detail")
    except ValueError:
        return reply.text
    if isinstance(detail, list):
        return "; ".join(f"{item.get('field')}: {item.get('message')}" for item in detail)
    return str(detail)


def submit(
    args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="JOB.toml|JOB.json | -- COMMAND...",
            help="a job file, or a command; stoker's options go before it (every option from"
            " the command's first word on is the command's own)",
        ),
    ] = None,
    *,
    name: Annotated[str | None, typer.Option(help="the job's name \\[the script's]")] = None,
    gpus: Annotated[int | None, typer.Option(min=1, help="GPUs, one rank each [1]")] = None,
    batch_size: Annotated[
        int | None,
        typer.Option(min=1, help="global batch, for the planner \\[the daemon's: 64]"),
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option(
            metavar="K=V", help="a variable for the job (it gets none of this shell's); repeat"
        ),
    ] = None,
    continue_from: Annotated[
        str | None,
        typer.Option(
            metavar="ID",
            help="start from this ended job's newest checkpoint, not from scratch (`stoker"
            " resume ID` runs it again with its own settings)",
        ),
    ] = None,
    time_limit: Annotated[
        float | None,
        typer.Option(
            min=1.0,
            metavar="SECONDS",
            help="the longest it may run: then it checkpoints and ends (`stoker resume` goes on)",
        ),
    ] = None,
    follow: Annotated[bool, Follow] = False,
    json_output: Annotated[bool, JsonOut] = False,
    url: Url = None,
    token: Token = None,
    state_dir: StateDir = None,
) -> None:
    """Submit a job and print its id (--json: the whole job; --follow: its id, then its logs
    until it ends): a TOML (or JSON) file of its fields, or a command to run from this
    directory (`stoker submit --gpus 2 -- python train.py --lr 0.1`)."""
    given = list(args or [])
    if not given:
        fail("give a job file (JOB.toml or JOB.json) or a command after --")
    if given[0].endswith((".toml", ".json")):
        for_a_command = {"--name": name, "--gpus": gpus, "--batch-size": batch_size, "--env": env}
        if told := [flag for flag, value in for_a_command.items() if value is not None]:
            fail(f"{', '.join(told)}: for a command; a job file sets its own, in {given[0]}")
        body = _job_file(given)
    else:
        body = {
            "name": name or _name_of(given),
            "command": given,
            "workdir": str(Path.cwd()),
            "env": _variables(env or []),
        }
        for field, value in (("gpus", gpus), ("batch_size", batch_size)):
            if value is not None:  # else the daemon's default
                body[field] = value
    if continue_from is not None:
        body["continue_from"] = continue_from
    if time_limit is not None:
        body["time_limit_s"] = time_limit
    daemon = Daemon(url, token, state_dir)
    _submitted(daemon, daemon.call("POST", "/v1/jobs", body), follow, json_output)


def resume(
    job_id: Annotated[str, typer.Argument(metavar="ID")],
    *,
    follow: Annotated[bool, Follow] = False,
    json_output: Annotated[bool, JsonOut] = False,
    again: Annotated[
        bool,
        typer.Option(
            "--again", help="though a job went on from it already: a second from its checkpoint"
        ),
    ] = False,
    url: Url = None,
    token: Token = None,
    state_dir: StateDir = None,
) -> None:
    """Submit an ended job (cancelled, failed or completed) again from its newest
    checkpoint: a new job of the same settings that goes on where it stopped (its model,
    optimizer, epoch and data position). Prints its id (--json: the whole job; --follow: its
    id, then its logs until it ends). A job resumed already is refused, pointing to the job
    that went on from it, unless --again. To change a setting on the way (more epochs,
    say), submit the job anew with `--continue-from ID`."""
    daemon = Daemon(url, token, state_dir)
    query = "?again=true" if again else ""
    job = daemon.call("POST", f"/v1/jobs/{job_id}/resume{query}")
    if follow:
        typer.echo(f"{job['id']} goes on from {job_id}'s newest checkpoint", err=True)
    _submitted(daemon, job, follow, json_output)


def _submitted(daemon: Daemon, job: dict[str, Any], follow: bool, whole: bool) -> None:
    """Print a job just submitted: its id (`whole`: all of it, as JSON), as sbatch prints
    its job's number; or, `follow`, its id and its logs until it ends."""
    if whole:
        print_json(job)
        return
    if not follow:
        typer.echo(job["id"])
        return
    typer.echo(f"submitted {job['id']}", err=True)
    if job["state"] == "submitted" and job.get("reason"):  # the window it waits for, say
        typer.echo(f"  {job['reason']}", err=True)
    _follow(daemon, job["id"])


def _job_file(given: list[str]) -> dict[str, Any]:
    """The job `given[0]` describes, its relative paths made its folder's."""
    if len(given) > 1:  # read as a command's arguments
        fail(
            f"{' '.join(given[1:])}: after the job file; stoker's options go before it, as "
            f"sbatch's do (`stoker submit [OPTIONS] {given[0]}`)"
        )
    text = read_text(Path(given[0]), "job")
    try:
        # JSON as the REST API takes it (`POST /v1/jobs`), else TOML
        body = json.loads(text) if given[0].endswith(".json") else tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        fail(f"{given[0]}: not valid TOML: {error}")
    except json.JSONDecodeError as error:
        fail(f"{given[0]}: not valid JSON: {error}")
    if not isinstance(body, dict):
        fail(f"{given[0]}: a job file holds one object of the job's fields")
    here = Path(given[0]).resolve().parent
    if "name" not in body:  # as for a command line: its script's name, else the file's
        command = body.get("command")
        words = command if isinstance(command, list) else []
        argv = [word for word in words if isinstance(word, str)]
        body["name"] = _name_of(argv if argv and len(argv) == len(words) else [given[0]])
    if "command" in body and "workdir" not in body:
        body["workdir"] = str(here)
    for key in ("workdir", "dataset"):
        if isinstance(body.get(key), str) and not Path(body[key]).is_absolute():
            body[key] = str(here / body[key])
    return body


def _name_of(command: list[str]) -> str:
    """A job name from its command: the script's name (`train.py` -> `train`)."""
    script = next((arg for arg in command[1:] if arg.endswith(".py")), command[0])
    stem = Path(script).stem
    cleaned = "".join(c if c.isalnum() or c in "._-" else "-" for c in stem).lstrip(".-_")
    return (cleaned or "job")[:40]


def _variables(pairs: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            fail(f"--env {pair!r}: write it as NAME=value")
        found[key] = value
    return found


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
    _follow(Daemon(url, token, state_dir), job_id, streams=streams, rank=rank, tail=tail,
            until_end=follow)  # fmt: skip


_STREAMS = ("all",)  # both, in the order the job wrote them
_SHOWN_LINES = 100  # more than a reason quotes of a stderr (daemon/exitreason.py)
FINAL_STATES = ("completed", "failed", "cancelled")


def _follow(
    daemon: "Daemon",
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
    failures: list[str] = []
    # The last lines of rank `rank`'s stderr as copied here, which a failure's reason need
    # not show again.
    shown: deque[str] = deque(maxlen=_SHOWN_LINES)

    # A relaunch's "started again" line is in each log that holds output: said once, by
    # whichever stream copies it first.
    marks: set[str] = set()
    marks_lock = threading.Lock()

    def first_time(line: str) -> bool:
        with marks_lock:
            seen = line in marks
            marks.add(line)
            return not seen

    def copy(stream: str) -> None:
        once = first_time if len(streams) > 1 else None
        kept = shown if stream in ("stderr", "all") else None
        try:
            _copy_log(daemon, job_id, stream, rank=rank, tail=tail, follow=until_end, once=once,
                      shown=kept)  # fmt: skip
        except _LogUnreadable as error:  # said once, by the main thread
            failures.append(str(error))
        except BrokenPipeError:  # `stoker logs ID | head`: the reader has what it wanted
            closed.append(stream)

    closed: list[str] = []  # our streams whose reader went away
    copiers = [threading.Thread(target=copy, args=(stream,), daemon=True) for stream in streams]
    for copier in copiers:
        copier.start()
    try:
        for copier in copiers:
            while copier.is_alive() and not closed:
                copier.join(timeout=0.2)  # a join without a timeout would not see Ctrl-C
    except KeyboardInterrupt:
        said = f"stopped following {job_id}, which runs on: `stoker logs {job_id} -f` follows"
        typer.echo(f"\n{said} it again, `stoker cancel {job_id}` stops it", err=True)
        raise typer.Exit(130) from None
    if closed:  # quietly, with `cat`'s status (128 + SIGPIPE): its reader went away
        for stream in closed:
            quiet = os.open(os.devnull, os.O_WRONLY)  # the interpreter's last flush finds it
            os.dup2(quiet, (sys.stderr if stream == "stderr" else sys.stdout).fileno())
        raise typer.Exit(128 + signal.SIGPIPE)
    if failures:
        fail(failures[0])
    if until_end:
        job = daemon.call("GET", f"/v1/jobs/{job_id}")
        # A script that failed after its final step (its save) did not do its work either.
        ended_badly = job["state"] != "completed" or bool(job.get("failed_after_end"))
        if ended_badly and job.get("reason"):  # its exit code, and the daemon's hint if any
            why = _unrepeated(job["reason"], list(shown))
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


def after_end(job: dict[str, Any]) -> str:
    """What a completed job's processes did after its final step, when it was not an exit
    0 (its script failed saving, say): said beside its state, which stays `completed`."""
    code = job.get("exit_code")  # absent from an older daemon's reply
    if job["state"] != "completed" or not job.get("failed_after_end") or not code:
        return ""
    return f", then its script {_exited(code)} after its final step"


def _exited(code: int) -> str:
    return f"exited with code {code}" if code > 0 else f"was killed by signal {-code}"


def _copy_log(
    daemon: "Daemon",
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


def jobs(
    *,
    url: Url = None,
    token: Token = None,
    state_dir: StateDir = None,
    json_output: Annotated[bool, typer.Option("--json", help="as JSON")] = False,
    states: Annotated[
        list[str] | None,
        typer.Option(
            "--state",
            "-t",
            metavar="STATE",
            help="only jobs in this state (running, submitted, completed, failed, ...); repeat"
            " it, or give several with commas",
        ),
    ] = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", "-u", help="only this tenant's jobs (the admin's)")
    ] = None,
    name: Annotated[str | None, typer.Option("--name", "-n", help="only jobs of this name")] = None,
) -> None:
    """List the jobs the token may see, oldest first: id, state, model (or the command's
    script), GPUs, loader workers per GPU, iterations done (of how many), and for a running
    job the time it has `left` at its last minute's pace, the samples/s of its newest
    heartbeat and how far that is from what the plan predicted (`vs_plan`). A job that
    ended while its processes run on (a script saving after training, holding its GPUs)
    reads `completed (exiting)`."""
    query: dict[str, Any] = {"tenant": tenant, "name": name}
    query["state"] = [part.strip() for given in states or [] for part in given.split(",")]
    query = {key: value for key, value in query.items() if value}
    found = Daemon(url, token, state_dir).every_page("/v1/jobs", query)
    if json_output:
        print_json(found)
        return
    rows = [("id", "state", "what", "gpus", "workers", "progress", "left", "samples/s", "vs_plan")]
    for job in found:
        workers = job["workers_per_gpu"]
        if workers is None or job["state"] in FINAL_STATES:  # a restarted daemon no longer knows
            workers = "-"
        state = job["state"] + (" (exiting)" if job.get("exiting") else "")
        if job.get("failed_after_end") and job.get("exit_code"):
            state += f" (exit {job['exit_code']})"  # its script failed after its final step
        length = job["iterations"]
        progress = f"{job['iteration']}/{length}" if length is not None else str(job["iteration"])
        if job.get("unmanaged") and not job["iteration"]:  # no SDK: nothing says how far
            progress = "-"
        what = job["model"] or _name_of(job["command"] or ["command"])
        left = job.get("seconds_left")  # absent from an older daemon's reply
        rate, error = job["measured_samples_per_s"], job["prediction_error"]
        if job["state"] != "running":  # a heartbeat of its start or its end says little
            rate = error = None
        rows.append(
            (
                job["id"],
                state,
                what,
                str(job["gpus"]),
                str(workers),
                progress,
                "-" if left is None else span(left),
                "-" if rate is None else f"{rate:,.0f}",
                "-" if error is None else signed_percent(error),
            )
        )
    typer.echo(table(rows, right=6), nl=False)


def table(rows: Sequence[Sequence[str]], *, right: int) -> str:
    """`rows` in columns as wide as their widest cell; the last `right` ones right-aligned."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    split = len(widths) - right
    return "".join(
        "  ".join(
            [cell.ljust(width) for cell, width in zip(row[:split], widths[:split], strict=True)]
            + [cell.rjust(width) for cell, width in zip(row[split:], widths[split:], strict=True)]
        )
        + "\n"
        for row in rows
    )


def cancel(
    job_id: Annotated[str, typer.Argument(metavar="ID")],
    url: Url = None,
    token: Token = None,
    state_dir: StateDir = None,
) -> None:
    """Cancel a job; prints it as JSON. A job that ended while its processes run on (its
    script saving after its final step) has them stopped."""
    daemon = Daemon(url, token, state_dir)
    before = daemon.call("GET", f"/v1/jobs/{job_id}")
    job = daemon.call("DELETE", f"/v1/jobs/{job_id}")
    if before.get("exiting"):
        said = f"{job_id} had {job['state']}; its processes, running on after it, were stopped"
        typer.echo(said, err=True)
    elif job["state"] in ("completed", "failed"):
        typer.echo(f"{job_id} had already {job['state']}: nothing to cancel", err=True)
    print_json(job)


def dashboard(
    *,
    url: Url = None,
    token: Token = None,
    state_dir: StateDir = None,
) -> None:
    """Print the dashboard's link. It carries your token: the page trades it for a cookie,
    so keep the link to yourself."""
    daemon = Daemon(url, token, state_dir)
    daemon.call("GET", "/v1/node")  # a daemon is there, and the token is good
    typer.echo(dashboard_link(daemon.url, daemon.token))


def dashboard_link(url: str, token: str) -> str:
    """`url`'s dashboard, with `token` for the page to exchange."""
    return f"{url.rstrip('/')}/?{urlencode({'token': token})}"
