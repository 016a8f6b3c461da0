"""What planning on each job's learned curve (scheduler/curves.py) changes in simulation:
the default policy with `scheduler.learn_curves` off and on, beside `balance` and
`static`, on the paper's two workloads and on generated ones (issue 16, items 1 and 5).

Run: .venv/bin/python -m bench.bench_curves [--workloads 100] [--jobs 12] [--policy optimal]
Prints one row per workload (makespan / average JCT, seconds) and the geometric means;
saves bench/out/curves.json. About 15 s with the defaults.

The simulator's truth is the calibrated testbed and the daemon's prior is the TPM fitted
on that testbed's profiling, so priors are close to the truth here: this measures what
learning costs or gains in plans and pauses, not how far it corrects a wrong prior (the
unit tests and the live demo show that).
"""

import argparse
import math
import statistics
from pathlib import Path

from bench.common import save
from workloads.generator import GeneratorOptions, generate_workload
from workloads.simulator import simulate
from workloads.spec import Workload, load_workload

PAPER = ("paper-dynamic", "paper-static")
CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "workloads"


def measure(workload: Workload, policy: str) -> dict[str, list[float]]:
    """[makespan, average JCT] of each run on `workload`."""
    runs: dict[str, list[float]] = {}
    for learn in (False, True):
        scheduler = {**workload.scheduler, "learn_curves": learn}
        result = simulate(workload.model_copy(update={"scheduler": scheduler}), policy)
        runs[f"{policy}, learning {'on' if learn else 'off'}"] = [
            result.makespan_s,
            result.avg_jct_s,
        ]
    for baseline in ("balance", "static"):
        result = simulate(workload, baseline)
        runs[baseline] = [result.makespan_s, result.avg_jct_s]
    return runs


def geometric_mean(values: list[float]) -> float:
    return math.exp(statistics.mean(math.log(value) for value in values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=100, help="generated, seeds 1..N")
    parser.add_argument("--jobs", type=int, default=12, help="per generated workload")
    parser.add_argument("--policy", default="optimal", help="the policy that learns")
    args = parser.parse_args()
    workloads = [(name, load_workload(CONFIGS / f"{name}.toml")) for name in PAPER]
    workloads += [
        (f"generated-seed{seed}", generate_workload(GeneratorOptions(jobs=args.jobs, seed=seed)))
        for seed in range(1, args.workloads + 1)
    ]
    rows = {}
    for name, workload in workloads:
        rows[name] = measure(workload, args.policy)
        cells = "  ".join(f"{run}: {m:.0f} / {j:.0f}" for run, (m, j) in rows[name].items())
        print(f"{name:<22} {cells}", flush=True)
    runs = list(next(iter(rows.values())))
    means = {
        run: {
            "makespan_s": geometric_mean([row[run][0] for row in rows.values()]),
            "avg_jct_s": geometric_mean([row[run][1] for row in rows.values()]),
        }
        for run in runs
    }
    print(f"\ngeometric means over {len(rows)} workloads (makespan / average JCT, s):")
    for run, mean in means.items():
        print(f"  {run:<26} {mean['makespan_s']:8.1f} / {mean['avg_jct_s']:7.1f}")
    path = save("curves", {"policy": args.policy, "workloads": rows, "geometric_means": means})
    print(f"saved {path}")


if __name__ == "__main__":
    main()
