"""The `stoker` command line.

Each command group lives in its own module; this one only assembles them. Output meant for
machines is one JSON object on stdout; diagnostics go to stderr.
"""

import inspect

import typer

from cli.allocate import register_allocate
from cli.backup import backup
from cli.dataset import dataset_app, profile_command
from cli.decoder import decoder_app
from cli.demo import demo_command
from cli.events import register_events
from cli.job_commands import register_job_commands
from cli.job_view import register_job_view
from cli.serve import register_serve
from cli.simulate import register_simulate
from cli.tpm_commands import tpm_app
from cli.workload_commands import workload_app

app = typer.Typer(
    name="stoker",
    help="Split a GPU node's data-loader workers among its training jobs.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(tpm_app, name="tpm")
app.add_typer(workload_app, name="workload")
app.add_typer(dataset_app, name="dataset")
app.add_typer(decoder_app, name="decoder")
app.command("profile")(profile_command)
register_allocate(app)
register_simulate(app)
register_serve(app)
register_job_commands(app)
register_events(app)
register_job_view(app)
app.command("demo")(demo_command)
app.command("backup")(backup)


def _summaries_on_one_line(group: typer.Typer) -> None:
    """typer keeps a docstring's line breaks in a group's list of commands, which then
    breaks mid-sentence: each command's first paragraph goes there as one line."""
    for info in group.registered_commands:
        if info.short_help is None and info.callback is not None:
            first = inspect.cleandoc(info.help or info.callback.__doc__ or "").split("\n\n")[0]
            info.short_help = " ".join(first.split())
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _summaries_on_one_line(sub.typer_instance)


_summaries_on_one_line(app)
