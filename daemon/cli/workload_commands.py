"""`stoker workload ...`: make workload files."""

import typer

workload_app = typer.Typer(help="Make workload files for `stoker simulate`.", no_args_is_help=True)
