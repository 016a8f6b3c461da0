"""What every CLI command shares: reading input files and failing with a clear message."""

import json
import sys
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
