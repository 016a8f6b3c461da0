"""The `stoker` command line.

Each command group lives in its own module; this one only assembles them. Output meant for
machines is one JSON object on stdout; diagnostics go to stderr.

A command's module is imported when that command runs (or when a listing of every command,
such as `stoker --help`, needs them all): `stoker jobs` loads neither the allocator's numpy
nor the workload generator. COMMANDS names each top-level command, in the order of
`stoker --help`, with the function that registers it (and its siblings of the same module).
"""

import inspect
from collections.abc import Callable

import typer
from typer._click import Command, Context  # typer's own click, as TyperGroup's signatures
from typer.core import TyperGroup


def _allocate(app: typer.Typer) -> None:
    from cli.allocate import register_allocate  # noqa: PLC0415 (the CLI imports lazily)

    register_allocate(app)


def _backup(app: typer.Typer) -> None:
    from cli.backup import backup  # noqa: PLC0415 (the CLI imports lazily)

    app.command("backup")(backup)


def _dataset(app: typer.Typer) -> None:
    from cli.dataset import dataset_app, profile_command  # noqa: PLC0415 (the CLI imports lazily)

    app.command("profile")(profile_command)
    app.add_typer(dataset_app, name="dataset")


def _decoder(app: typer.Typer) -> None:
    from cli.decoder import decoder_app  # noqa: PLC0415 (the CLI imports lazily)

    app.add_typer(decoder_app, name="decoder")


def _demo(app: typer.Typer) -> None:
    from cli.demo import demo_command  # noqa: PLC0415 (the CLI imports lazily)

    app.command("demo")(demo_command)


def _events(app: typer.Typer) -> None:
    from cli.events import register_events  # noqa: PLC0415 (the CLI imports lazily)

    register_events(app)


def _job_commands(app: typer.Typer) -> None:
    from cli.job_commands import register_job_commands  # noqa: PLC0415 (the CLI imports lazily)

    register_job_commands(app)


def _job_view(app: typer.Typer) -> None:
    from cli.job_view import register_job_view  # noqa: PLC0415 (the CLI imports lazily)

    register_job_view(app)


def _serve(app: typer.Typer) -> None:
    from cli.serve import register_serve  # noqa: PLC0415 (the CLI imports lazily)

    register_serve(app)


def _simulate(app: typer.Typer) -> None:
    from cli.simulate import register_simulate  # noqa: PLC0415 (the CLI imports lazily)

    register_simulate(app)


def _tpm(app: typer.Typer) -> None:
    from cli.tpm_commands import tpm_app  # noqa: PLC0415 (the CLI imports lazily)

    app.add_typer(tpm_app, name="tpm")


def _workload(app: typer.Typer) -> None:
    from cli.workload_commands import workload_app  # noqa: PLC0415 (the CLI imports lazily)

    app.add_typer(workload_app, name="workload")


COMMANDS: dict[str, Callable[[typer.Typer], None]] = {
    "profile": _dataset,
    "allocate": _allocate,
    "simulate": _simulate,
    "serve": _serve,
    "node": _serve,
    "agent": _serve,
    "submit": _job_commands,
    "jobs": _job_commands,
    "logs": _job_commands,
    "cancel": _job_commands,
    "resume": _job_commands,
    "dashboard": _job_commands,
    "events": _events,
    "show": _job_view,
    "metrics": _job_view,
    "demo": _demo,
    "backup": _backup,
    "tpm": _tpm,
    "workload": _workload,
    "dataset": _dataset,
    "decoder": _decoder,
}


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


class LazyGroup(TyperGroup):
    """The top-level group: it builds a command (and its module's siblings) from COMMANDS
    when it is asked for it by name; `commands`, the whole table, builds them all."""

    _loaded: dict[str, Command]

    @property  # type: ignore[override]
    def commands(self) -> dict[str, Command]:
        for name in COMMANDS:
            self._load(name)
        return {name: self._loaded[name] for name in COMMANDS}

    @commands.setter
    def commands(self, value: dict[str, Command]) -> None:
        self._loaded = dict(value)

    def list_commands(self, ctx: Context) -> list[str]:
        return list(COMMANDS)

    def get_command(
        self,
        ctx: Context,
        cmd_name: str,
    ) -> Command | None:
        return self._load(cmd_name)

    def _load(self, name: str) -> Command | None:
        if name not in self._loaded and name in COMMANDS:
            module = typer.Typer(add_completion=False)
            COMMANDS[name](module)
            _summaries_on_one_line(module)
            self._loaded.update(typer.main.get_group(module).commands)
        return self._loaded.get(name)


app = typer.Typer(
    name="stoker",
    help="Split a GPU node's data-loader workers among its training jobs.",
    no_args_is_help=True,
    add_completion=False,
    cls=LazyGroup,
)


@app.callback()
def _stoker() -> None:
    """Every command is in COMMANDS (typer makes a group of an app with a callback)."""
