"""What every CLI command shares: reading and writing files, failing with a clear message,
and the shapes of its output for people (spans of time, signed percents, tables)."""

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import typer

# Exit status for input the user must fix (typer/click use 2 for usage errors too).
BAD_INPUT = 2


def fail(message: str) -> NoReturn:
    """Print `error: message` to stderr and exit with BAD_INPUT; no traceback."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(BAD_INPUT)


def read_text(path: Path, what: str) -> str:
    """A file's text, or a clear failure naming the file and what it was for."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        fail(f"{path}: no such {what} file")
    except IsADirectoryError:
        fail(f"{path}: is a directory, expected a {what} file")
    except (OSError, UnicodeDecodeError) as error:
        fail(f"{path}: cannot read {what} file: {error}")


def read_json(path: Path, what: str) -> object:
    """Parse a JSON file, failing with the line and column of a syntax error."""
    try:
        return json.loads(read_text(path, what))
    except json.JSONDecodeError as error:
        fail(f"{path}: not valid JSON at line {error.lineno}, column {error.colno}: {error.msg}")


def print_json(payload: object) -> None:
    """One JSON object on stdout, the machine-readable output of a command."""
    sys.stdout.write(json.dumps(payload, indent=2) + "\n")


def write_atomically(path: Path, text: str, what: str) -> None:
    """Replace `path` with `text` all at once (written, synced, renamed into place), or fail
    naming the file and leaving it as it was. `what` names the content in the message."""
    try:
        descriptor, temporary = tempfile.mkstemp(
            prefix=f".{path.name}.", suffix=".tmp", dir=path.parent
        )
    except OSError as error:
        fail(f"{path}: cannot write the {what} there: {error.strerror}")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)  # mkstemp makes the file private; ours are no secret
        os.replace(temporary, path)
    except OSError as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        fail(f"{path}: cannot write the {what} there: {error.strerror}")
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def signed_percent(fraction: float) -> str:
    """A relative difference in whole percent with its sign: +4%, -12%, and 0% for what
    rounds to nothing (not "-0%")."""
    rounded = round(100 * fraction)
    return f"{rounded:+d}%" if rounded else "0%"


def span(seconds: float) -> str:
    """A length of time as one reads it: 45 s, 12 min, 3.5 h."""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


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
