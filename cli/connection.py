"""How a CLI command reaches a running daemon: `Daemon`, the connection every client
command uses, which turns HTTP errors into messages a user can act on; the options that
name the daemon (`--url`, `--token`, `--state-dir`); and where the daemon and its token are
found when those are not given.

The token: `--token`, else `STOKER_TOKEN`, else the admin token in the daemon's state dir,
which works on the daemon's own machine: `--state-dir`, else `STOKER_STATE_DIR`, else the
nearest `.stoker` (where `stoker serve` keeps its state by default) in this folder or one
above it, so a command run from a project's subfolder finds the daemon started at its top.
Where the daemon is: `--url`, else `STOKER_URL`, else the URL the daemon wrote into that
state dir (`daemon.url`, read only if it is this user's file: a daemon on another port is
found too; one this user cannot read stops the command, which asks for `--url`), else
http://127.0.0.1:8470.
"""

import os
import pwd
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.common import fail, read_text

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
