"""`stoker allocate`: plan a request file with one policy, or compare them all."""

from pathlib import Path
from typing import Annotated

import typer

from allocator import POLICIES, AllocationPlan, AllocationRequest, AllocatorError, allocate
from cli.common import fail, print_json, read_json, read_text


def register_allocate(app: typer.Typer) -> None:
    """Add the `allocate` command to the main app."""
    app.command("allocate")(allocate_command)


def allocate_command(
    request_file: Annotated[Path, typer.Argument(metavar="REQUEST.json", help="node and jobs")],
    policy: Annotated[
        str, typer.Option(help=f"one of: {', '.join(POLICIES)}", show_default=True)
    ] = "optimal",
    tpm: Annotated[
        Path | None,
        typer.Option(metavar="MODEL.json", help="fitted TPM for jobs that give flops/pipeline"),
    ] = None,
    compare: Annotated[
        bool, typer.Option("--compare", help="print every policy side by side, for people")
    ] = False,
) -> None:
    """Split the node's loader workers among the request's jobs and print the plan as JSON."""
    request = load_request(request_file, tpm)
    if compare:
        typer.echo(compare_table(request))
        for line in profile_fits(request_file):
            typer.echo(line)
        return
    try:
        plan = allocate(request, policy)
    except AllocatorError as error:
        fail(f"--policy: {error}")
    print_json(plan.to_dict())


def load_request(request_file: Path, tpm: Path | None) -> AllocationRequest:
    """Read and validate a request file, resolving rates through the TPM when given."""
    from pydantic import ValidationError  # noqa: PLC0415 (the CLI imports lazily)

    from daemon.schemas import AllocationRequestBody, describe_validation_error  # noqa: PLC0415
    from tpm import FittedTPM, TpmError  # noqa: PLC0415

    raw = read_json(request_file, "request")
    model = None
    if tpm is not None:
        try:
            model = FittedTPM.from_json(read_text(tpm, "TPM model"), str(tpm))
        except TpmError as error:
            fail(str(error))
    try:
        return AllocationRequestBody.model_validate(raw).to_request(model)
    except ValidationError as error:
        fail(f"{request_file}: {describe_validation_error(error)}")
    except (AllocatorError, TpmError) as error:
        fail(f"{request_file}: {error}")


def profile_fits(request_file: Path) -> list[str]:
    """What the planner took each measured curve for (the request read and checked by
    `load_request` already): the knee fitted to its points, and how close it came."""
    from allocator.curvefit import fit_knee  # noqa: PLC0415
    from daemon.schemas import AllocationRequestBody  # noqa: PLC0415

    body = AllocationRequestBody.model_validate(read_json(request_file, "request"))
    lines = []
    for job in body.jobs:
        if job.profile is None:
            continue
        knee = fit_knee(job.profile.workers_per_gpu, job.profile.samples_per_s)
        sharpness = (
            f"p = {job.knee_sharpness:g} as given (the fit's {knee.sharpness:.1f})"
            if job.knee_sharpness is not None
            else f"p = {knee.sharpness:.1f}"
        )
        lines.append(
            f"{job.id}: its profile fitted as c = {knee.sample_cost_s:.4g} s a sample a worker,"
            f" G = {knee.peak_samples_per_s:,.0f} samples/s a GPU, {sharpness};"
            f" within {knee.worst_error:.1%} of its {len(job.profile.samples_per_s)} points"
        )
    return lines


def compare_table(request: AllocationRequest) -> str:
    """Workers per GPU and predicted samples/s of each job under every policy."""
    plans: list[AllocationPlan] = [allocate(request, name) for name in POLICIES]
    name_width = max([len("job"), *(len(job.id) for job in request.jobs)])
    header = f"{'job':<{name_width}}  gpus " + "".join(f"{p.policy:>16}" for p in plans)
    lines = [
        f"node: {request.node.cpu_workers} loader processes; "
        "cells are workers per GPU / predicted samples per second",
        header,
    ]
    for job in request.jobs:
        cells = "".join(
            f"{a.workers_per_gpu:>6} /{a.predicted_samples_per_s:>8.1f}"
            for a in (p.allocations[job.id] for p in plans)
        )
        lines.append(f"{job.id:<{name_width}}  {job.gpus:>4} {cells}")
    lines.append(
        f"{'total':<{name_width}}       "
        + "".join(
            f"{p.loader_processes:>6} /{p.predicted_total_samples_per_s:>8.1f}" for p in plans
        )
    )
    balance_total = plans[0].predicted_total_samples_per_s
    lines.append(
        f"{'vs balance':<{name_width}}       "
        + "".join(f"{p.predicted_total_samples_per_s / balance_total - 1:>+16.1%}" for p in plans)
    )
    return "\n".join(lines)
