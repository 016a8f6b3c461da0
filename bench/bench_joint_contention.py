"""The node's contention learned from jobs timed together (tpm/joint.py; issue 16, item 1),
in simulation: how far the curve the core plans on ends from the truth's, and what that
is worth, when the core starts from a wrong curve.

Run: .venv/bin/python -m bench.bench_joint_contention [--workloads 20]
Simulates paper-dynamic and generated workloads (seeds 1..N, 12 jobs) under the default
policy three ways: the core starting from the curve fitted to the simulated single-job
profiles (the default, close to the truth here), and from a node said to have no
contention (`contention_prior = ()`), with `scheduler.learn_contention` off and on. For
each it prints the makespan and average JCT and the planned curve's largest error against
the truth's eta at any load up to C, and at the loads the jobs' timings measured (jobs
timed at two loads or more; none with learning off); saves
bench/out/joint_contention.json. About 10 s with the defaults.
"""

import argparse
import math
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.common import save
from scheduler.config import DEFAULT_POLICY
from workloads.generator import GeneratorOptions, generate_workload
from workloads.simulator import Simulation, SimulationOptions
from workloads.spec import Workload, load_workload

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "workloads"
NO_CONTENTION: tuple[tuple[float, float], ...] = ()
RUNS: dict[str, tuple[tuple[tuple[float, float], ...] | None, bool]] = {
    "profiled prior, learning on": (None, True),
    "no-contention prior, learning off": (NO_CONTENTION, False),
    "no-contention prior, learning on": (NO_CONTENTION, True),
}


def run(workload: Workload, prior: tuple[tuple[float, float], ...] | None, learn: bool) -> Any:
    """Makespan, average JCT and the planned curve's errors at the loads run, one run."""
    scheduler = {**workload.scheduler, "learn_contention": learn}
    options = SimulationOptions(policy=DEFAULT_POLICY, contention_prior=prior)
    simulation = Simulation(workload.model_copy(update={"scheduler": scheduler}), options)
    result = simulation.run()
    planned = simulation.planned_node.contention

    def errors(loads: Iterable[int]) -> list[float]:
        return [abs(planned.efficiency(d) / simulation.truth.efficiency(d) - 1.0) for d in loads]

    return {
        "makespan_s": result.makespan_s,
        "avg_jct_s": result.avg_jct_s,
        "eta_error_measured": max(errors(simulation.measured_loads()), default=None),
        "eta_error_all": max(errors(range(1, simulation.planned_node.cpu_workers + 1))),
    }


def geometric_mean(values: list[float]) -> float:
    return math.exp(statistics.mean(math.log(value) for value in values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=20, help="generated, seeds 1..N")
    args = parser.parse_args()
    workloads = [("paper-dynamic", load_workload(CONFIGS / "paper-dynamic.toml"))]
    workloads += [
        (f"generated-seed{seed}", generate_workload(GeneratorOptions(jobs=12, seed=seed)))
        for seed in range(1, args.workloads + 1)
    ]
    rows: dict[str, dict[str, Any]] = {}
    for name, workload in workloads:
        rows[name] = {label: run(workload, *how) for label, how in RUNS.items()}
        cells = "  ".join(
            f"{label}: {r['makespan_s']:.0f} s, eta off by {r['eta_error_all']:.0%}"
            for label, r in rows[name].items()
        )
        print(f"{name:<20} {cells}", flush=True)
    summary = {
        label: {
            "makespan_s": geometric_mean([row[label]["makespan_s"] for row in rows.values()]),
            "avg_jct_s": geometric_mean([row[label]["avg_jct_s"] for row in rows.values()]),
            "eta_error_measured": max(
                (
                    error
                    for row in rows.values()
                    if (error := row[label]["eta_error_measured"]) is not None
                ),
                default=None,
            ),
            "eta_error_all": max(row[label]["eta_error_all"] for row in rows.values()),
        }
        for label in RUNS
    }
    print(f"\nover {len(rows)} workloads (geometric means; eta's largest error against the truth):")
    for label, mean in summary.items():
        measured = mean["eta_error_measured"]
        print(
            f"  {label:<36} {mean['makespan_s']:8.1f} s / {mean['avg_jct_s']:7.1f} s,"
            f" eta off by {'-' if measured is None else f'{measured:.1%}'} at the loads"
            f" measured, {mean['eta_error_all']:.1%} at any load up to C"
        )
    path = save(
        "joint_contention", {"policy": DEFAULT_POLICY, "workloads": rows, "summary": summary}
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
