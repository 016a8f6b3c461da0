"""The `stoker` command line.

Each command group lives in its own module; this one only assembles them. Output meant for
machines is one JSON object on stdout; diagnostics go to stderr.
"""

import typer

from cli.allocate import register_allocate
from cli.client import register_client
from cli.dataset import dataset_app, profile_command
from cli.decoder import decoder_app
from cli.demo import demo_command
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
register_client(app)
register_job_view(app)
app.command("demo")(demo_command)
