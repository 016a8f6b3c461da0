"""Every command block of README.md and docs/*.md runs as written (issue 15, item 9).

What runs: each fenced block marked `sh`, `bash` or `console` (in `console`, the lines after
`$ `), in document order, each in a fresh `bash` with `set -euo pipefail`, in a scratch copy
of the clone (its tracked and untracked files, with the venv linked in as .venv): one copy a
document, so files one block writes are there for the next. The environment is the test's,
with the venv's bin first on PATH (as after `make install` and activating it), no STOKER_*
variable but these:
- STOKER_PORT and STOKER_URL name a free port, so a daemon already on 8470 is no matter;
- STOKER_SCHEDULER__ARRIVAL_WINDOW_S and ..._COMPLETION_WINDOW_S are 1, so a submitted job
  starts in a second, not 30.

A line that starts `stoker serve` or `stoker decoder serve` keeps running, as the docs say
(the rest goes in another terminal): here it is started in the background and waited for
(/healthz; "serving on"), and stopped with SIGTERM after the document's last block, when it
must stop cleanly (no traceback; exit 0, or the SIGTERM uvicorn raises again once stopped).

Markers, an HTML comment on the line before a block's opening fence:
- `<!-- doc-test: skip (why) -->`: not run. The reason is required; skips are few (SKIPS).
- `<!-- doc-test: file NAME -->`: a block of file content (```toml, ...) the text tells the
  reader to save as NAME; it is written to the scratch copy when its turn comes.

A block that shows usage, with placeholders (`FILE.csv`, `[--seed N]`), is fenced `text`.
Its `stoker ...` lines are checked, not run: each must name a real command and only options
that command has. A fence with no language that holds a `stoker` line fails: say `sh` (it
runs) or `text` (it is a synopsis).
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import typer.main

from bench.daemon_driver import free_port
from cli import app

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUN = {"sh", "bash", "console"}
SKIPS = 4  # at most this many skipped blocks in all the documents
BLOCK_TIMEOUT_S = 120

pytestmark = pytest.mark.timeout(300)

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(?P<what>.*?)\s*-->\s*$")
# A server's line, after any VAR=value settings for it.
_SERVER = re.compile(r"^(?:\w+=\S*\s+)*stoker\s+(?P<which>serve|decoder\s+serve)\b")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it opens, its language, its lines and its marker."""

    document: Path
    line: int  # of the opening fence, 1-based
    lang: str
    lines: tuple[str, ...]
    marker: str | None  # the text after `doc-test:`, if the line before the fence has one

    @property
    def where(self) -> str:
        return f"{self.document.relative_to(REPO)}:{self.line}"

    def commands(self) -> list[str]:
        """The commands a reader types, each with its continuation lines (kept as typed,
        backslashes and all, for bash to read); prompts and output of a console block
        dropped."""
        typed = self.lines
        if self.lang == "console":
            typed = tuple(line[2:] for line in self.lines if line.startswith("$ "))
        joined: list[str] = []
        for line in typed:
            if joined and joined[-1].endswith("\\"):
                joined[-1] += "\n" + line
            else:
                joined.append(line)
        return [command for command in joined if command.strip()]


def blocks(document: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, in order."""
    lines = document.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        before = lines[index - 1] if index else ""
        marker = _MARKER.match(before)
        found.append(
            Block(
                document=document,
                line=index + 1,
                lang=opening["lang"],
                lines=tuple(line[indent:] for line in lines[index + 1 : end]),
                marker=marker["what"] if marker else None,
            )
        )
        index = end + 1
    return found


def skip_reason(block: Block) -> str | None:
    """Why a block is not run, from its marker; None for a block that runs."""
    if block.marker is None or not block.marker.startswith("skip"):
        return None
    reason = re.fullmatch(r"skip\s*\((?P<why>.+)\)", block.marker)
    assert reason is not None, f"{block.where}: write `doc-test: skip (why)`, with a reason"
    return reason["why"]


# ---- the scratch clone, its environment and its servers -----------------------------------


@pytest.fixture(scope="module")
def clone_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The clone's files as git sees them (tracked, and untracked but not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    template = tmp_path_factory.mktemp("clone")
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            (template / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, template / name)
    return template


def environment(port: int) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("STOKER_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env |= {
        "STOKER_PORT": str(port),
        "STOKER_URL": f"http://127.0.0.1:{port}",
        "STOKER_SCHEDULER__ARRIVAL_WINDOW_S": "1",
        "STOKER_SCHEDULER__COMPLETION_WINDOW_S": "1",
    }
    return env


@dataclass
class Server:
    block: Block
    command: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


class Session:
    """One document's run: its scratch clone, environment and background servers."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.env = environment(self.port)
        self.servers: list[Server] = []

    def run(self, block: Block) -> None:
        script: list[str] = []
        for command in block.commands():
            if _SERVER.match(command.strip()):
                self._script(block, script)
                script = []
                self._serve(block, command)
            else:
                script.append(command)
        self._script(block, script)

    def _script(self, block: Block, commands: list[str]) -> None:
        if not commands:
            return
        text = "set -euo pipefail\n" + "\n".join(commands) + "\n"
        try:
            done = subprocess.run(
                ["bash", "-c", text], cwd=self.workdir, env=self.env, capture_output=True,
                text=True, timeout=BLOCK_TIMEOUT_S, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired as error:
            pytest.fail(f"{block.where}: still running after {error.timeout} s:\n{text}")
        if done.returncode != 0:
            pytest.fail(
                f"{block.where}: exit {done.returncode}\n--- commands\n{text}--- stdout\n"
                f"{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
            )

    def _serve(self, block: Block, command: str) -> None:
        log = self.workdir / f"server-{len(self.servers)}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["bash", "-c", _exec(command)], cwd=self.workdir, env=self.env,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        server = Server(block, command, process, log)
        self.servers.append(server)
        matched = _SERVER.match(command.strip())
        assert matched is not None
        deadline = time.monotonic() + 60
        while not self._ready(server, matched["which"] == "serve"):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{block.where}: `{command}` did not start:\n{server.output()}")
            time.sleep(0.1)

    def _ready(self, server: Server, daemon: bool) -> bool:
        if not daemon:
            return "serving on" in server.output()
        port = re.search(r"--port[ =](\d+)", server.command)
        url = f"http://127.0.0.1:{port[1] if port else self.port}/healthz"
        try:
            return httpx.get(url, timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> list[str]:
        """Stop every server, newest first; what went wrong, if anything."""
        problems = []
        for server in reversed(self.servers):
            if server.process.poll() is None:
                os.killpg(server.process.pid, signal.SIGTERM)
            try:
                code = server.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(server.process.pid, signal.SIGKILL)
                code = server.process.wait()
            # uvicorn raises SIGTERM again once it has shut down, so -15 is a clean stop too.
            if code not in (0, -signal.SIGTERM) or "Traceback" in server.output():
                problems.append(
                    f"{server.block.where}: `{server.command}` ended with {code} on SIGTERM:\n"
                    f"{server.output()}"
                )
        return problems


def _exec(command: str) -> str:
    """`command` with bash replaced by it, so that SIGTERM reaches the server alone and its
    exit status is the server's: `exec` goes after any VAR=value settings."""
    settings = re.match(r"^(?:\w+=\S*\s+)*", command.strip())
    assert settings is not None
    return f"{settings[0]}exec {command.strip()[settings.end() :]}"


@pytest.fixture
def session(clone_files: Path, tmp_path: Path) -> Iterator[Session]:
    workdir = tmp_path / "clone"
    shutil.copytree(clone_files, workdir, symlinks=True)
    (workdir / ".venv").symlink_to(Path(sys.prefix))
    running = Session(workdir)
    yield running
    problems = running.stop()
    assert not problems, "\n".join(problems)


# ---- the tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_the_command_blocks_run_as_written(document: Path, session: Session) -> None:
    ran = 0
    for block in blocks(document):
        marker = block.marker or ""
        if marker.startswith("file "):
            target = session.workdir / marker.removeprefix("file ").strip()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("\n".join(block.lines) + "\n", encoding="utf-8")
        elif block.lang in RUN and skip_reason(block) is None:
            session.run(block)
            ran += 1
    if not ran:
        pytest.skip(f"{document.name} has no command block to run")


def test_every_command_block_runs_or_says_why_not() -> None:
    skipped = []
    for document in DOCUMENTS:
        for block in blocks(document):
            typed = [line for line in block.lines if line.lstrip("$ ").startswith("stoker ")]
            assert block.lang or not typed, (
                f"{block.where}: a block of `stoker` commands with no language: fence it "
                "```sh (it runs) or ```text (a synopsis, checked against --help)"
            )
            if block.marker is not None:
                assert block.marker.startswith(("skip", "file ")), (
                    f"{block.where}: unknown marker {block.marker!r}: `skip (why)` or `file NAME`"
                )
                if (reason := skip_reason(block)) is not None:
                    assert block.lang in RUN, f"{block.where}: skips a block that never runs"
                    skipped.append(f"{block.where}: {reason}")
    assert len(skipped) <= SKIPS, "more skipped blocks than SKIPS:\n" + "\n".join(skipped)


def synopses() -> list[tuple[str, str]]:
    """(where, one `stoker` command with its continuation lines) of every ```text block."""
    found = []
    for document in DOCUMENTS:
        for block in blocks(document):
            if block.lang != "text":
                continue
            for offset, line in enumerate(block.lines, start=1):
                if line.startswith("stoker "):
                    found.append((f"{block.where}+{offset}", line))
                elif line.startswith((" ", "\t")) and found and line.strip():
                    found[-1] = (found[-1][0], f"{found[-1][1]} {line.strip()}")
    return found


@pytest.mark.parametrize(("where", "synopsis"), synopses(), ids=lambda value: str(value)[:60])
def test_synopses_name_real_commands_and_their_options(where: str, synopsis: str) -> None:
    for part in re.split(r"\s(?:\||&&)\s", synopsis.split("#", 1)[0]):
        words = part.split()
        if not words or words[0] != "stoker":
            continue
        command = typer.main.get_command(app)
        for word in words[1:]:
            subcommands = getattr(command, "commands", {})
            if word not in subcommands:
                break
            command = subcommands[word]
        assert not getattr(command, "commands", {}), f"{where}: no command `{part.strip()}`"
        known = {option for param in command.params for option in param.opts + param.secondary_opts}
        for option in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", part):
            assert option in known | {"--help"}, f"{where}: `{command.name}` has no {option}"
