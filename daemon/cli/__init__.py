"""The `stoker` command line.

Each command group lives in its own module; this one only assembles them. Output meant for
machines is one JSON object on stdout; diagnostics go to stderr.
"""

import typer

from agents.cli import dataset_app, profile_command
from daemon.cli.allocate import register_allocate
from daemon.cli.client import register_client
from daemon.cli.demo import demo_command
from daemon.cli.serve import register_serve
from daemon.cli.simulate import register_simulate
from daemon.cli.tpm_commands import tpm_app
from daemon.cli.workload_commands import workload_app
from fpga_driver.cli import decoder_app

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
register_client(app, workload_app)
app.command("demo")(demo_command)
