"""Every command's help page shows what its text and its options' help say: typer renders
help with rich markup, where a bracketed word such as `[default]` or `[lookahead]` is a
style tag and vanished from the page, taking the default it named with it."""

import re
from typing import Any

import typer
from typer.testing import CliRunner

from cli import app

BRACKETED = re.compile(r"\[[^\]]*\]")


def _commands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every command under `command` (typer's own click: a group has `commands`), with the
    argv that reaches it."""
    found = [(path, command)]
    for name, sub in getattr(command, "commands", {}).items():
        found += _commands(sub, (*path, name))
    return found


def test_every_bracketed_default_in_an_options_help_is_shown() -> None:
    runner = CliRunner()
    commands = _commands(typer.main.get_command(app))
    assert len(commands) > 20, "the walk reached the subcommands"
    missing = []
    for path, command in commands:
        shown = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "400"}).output
        page = " ".join(shown.split())
        texts = [("", command.help or "")]
        texts += [(param.name, getattr(param, "help", None) or "") for param in command.params]
        for name, text in texts:
            for bracketed in BRACKETED.findall(text):
                if " ".join(bracketed.replace("\\[", "[").split()) not in page:
                    missing.append(f"stoker {' '.join(path)} {name}: {bracketed}")
    assert not missing, missing
