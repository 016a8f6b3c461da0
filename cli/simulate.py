"""`stoker simulate`: run a workload file on the simulated node under one policy."""

from pathlib import Path
from typing import Annotated

import typer

from allocator import POLICIES
from cli.common import fail, print_json
from scheduler.config import DEFAULT_POLICY
from workloads import ORACLE, ORACLE_OF

CHOICES = (*POLICIES, ORACLE, *(ORACLE_OF + policy for policy in POLICIES))


def register_simulate(app: typer.Typer) -> None:
    """Add the `simulate` command to the main app."""
    app.command("simulate")(simulate_command)


def simulate_command(
    workload_file: Annotated[Path, typer.Argument(metavar="WORKLOAD.toml", help="jobs and node")],
    policy: Annotated[
        str,
        typer.Option(
            help=f"one of: {', '.join(POLICIES)}, {ORACLE} (optimal on the truth's rates), "
            f"{ORACLE_OF}<policy> (that policy on the truth's rates)"
        ),
    ] = DEFAULT_POLICY,
    seed: Annotated[int, typer.Option(min=0, help="noise, profiling and cost draws")] = 0,
    json_output: Annotated[bool, typer.Option("--json", help="one JSON object on stdout")] = False,
    timeline: Annotated[
        Path | None, typer.Option(metavar="OUT.png", help="draw workers per job over time")
    ] = None,
) -> None:
    """Simulate the workload on a virtual GPU node driving the real scheduler core."""
    if policy not in CHOICES:
        fail(
            f"--policy: unknown policy {policy!r}; one of {', '.join(POLICIES)}, {ORACLE}, "
            f"or {ORACLE_OF}<one of those policies>"
        )
    from workloads.errors import WorkloadError  # noqa: PLC0415 (the CLI imports lazily)
    from workloads.simulator import simulate  # noqa: PLC0415
    from workloads.spec import load_workload  # noqa: PLC0415

    try:
        workload = load_workload(workload_file)
        result = simulate(workload, policy, seed)
    except WorkloadError as error:
        fail(str(error))
    if timeline is not None:
        from workloads.timeline import draw_timeline  # noqa: PLC0415 (matplotlib)

        try:
            draw_timeline(result, timeline, cpu_workers=workload.node.cpu_workers)
        except OSError as error:
            fail(f"--timeline {timeline}: cannot write: {error}")
    if json_output:
        print_json(result.to_dict())
    else:
        typer.echo(result.summary())
        if timeline is not None:
            typer.echo(f"\ntimeline written to {timeline}")
