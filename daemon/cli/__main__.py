"""`python -m daemon.cli`: the same as the `stoker` command."""

from daemon.cli import app

app()
