"""`python -m cli`: the same as the `stoker` command."""

from cli import app

app()
