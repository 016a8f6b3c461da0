"""The paper's experiments on the simulated testbed: every policy on paper-static and
paper-dynamic, mean over seeds, side by side with A-Dloader's numbers, plus timelines.

Run: .venv/bin/python -m bench.bench_paper [--seeds N] [--pictures docs/images]
Prints two tables and the goals, saves bench/out/paper.json.
"""

import argparse
import statistics
from pathlib import Path

from bench.common import save
from workloads import ORACLE
from workloads.bounds import RunBounds
from workloads.simulator import simulate
from workloads.spec import Workload, load_workload
from workloads.timeline import draw_timeline

REPO = Path(__file__).resolve().parents[1]
STATIC_POLICIES = ("balance", "proportion", "inverse", "waa", "optimal", "fair", ORACLE)
DYNAMIC_POLICIES = ("static", "balance", "waa", "optimal", "fair", ORACLE)
FIG3_BASELINES = {"balance": 1660.0, "proportion": 1554.0, "inverse": 1928.0}
FIG3 = {**FIG3_BASELINES, "waa": 1660.0 * 1.235}
TABLE2_MAKESPAN = {"balance": 132.0, "proportion": 222.0, "inverse": 163.0, "waa": 160.0}
DYNAMIC_MAKESPAN = {"static": 1200.0, "waa": 1089.0}
BOUND = "bound"  # the row of what no policy can beat
METRICS = (
    "sum_job_samples_per_s",
    "throughput_samples_per_s",
    "makespan_s",
    "avg_jct_s",
    "gpu_idle_fraction",
    "reallocations",
    "pause_overhead_s",
)


def paper_workload(name: str) -> Workload:
    """configs/workloads/<name>.toml."""
    return load_workload(REPO / "configs" / "workloads" / f"{name}.toml")


def run(workload: str, policies: tuple[str, ...], seeds: int) -> dict[str, dict[str, float]]:
    """Each policy's metrics, and under BOUND what no policy can beat (workloads/bounds.py),
    each a mean over the seeds."""
    spec = paper_workload(workload)
    table: dict[str, dict[str, float]] = {}
    bounds: list[RunBounds] = []
    for policy in policies:
        results = [simulate(spec, policy, seed) for seed in range(seeds)]
        rows = [result.to_dict() for result in results]
        table[policy] = {
            metric: statistics.fmean(float(r[metric]) for r in rows)  # type: ignore[arg-type]
            for metric in METRICS
        }
        bounds.extend(result.bounds for result in results)
    table[BOUND] = {
        "makespan_s": statistics.fmean(b.makespan_s for b in bounds),
        "throughput_samples_per_s": statistics.fmean(b.throughput_samples_per_s for b in bounds),
    }
    return table


def pictures(directory: Path) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for workload, policy in (
        ("paper-dynamic", "static"),
        ("paper-dynamic", "waa"),
        ("paper-dynamic", "optimal"),
        ("paper-static", "optimal"),
    ):
        spec = paper_workload(workload)
        path = directory / f"timeline-{workload}-{policy}.png"
        draw_timeline(simulate(spec, policy, 0), path, cpu_workers=spec.node.cpu_workers)
        written.append(str(path))
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--pictures", type=Path, default=None, help="write timelines here")
    args = parser.parse_args()
    static = run("paper-static", STATIC_POLICIES, args.seeds)
    dynamic = run("paper-dynamic", DYNAMIC_POLICIES, args.seeds)
    print(f"paper-static, mean of {args.seeds} seeds (paper: Fig. 3 and Table II)")
    print(
        f"{'policy':>11} {'sum of jobs':>12} {'paper':>7} {'agg. thr':>9} {'makespan':>9}"
        f" {'paper':>6} {'avg JCT':>8} {'GPU idle':>9} {'reallocs':>9}"
    )
    for policy, row in static.items():
        if policy == BOUND:
            continue
        paper = FIG3.get(policy)
        made = TABLE2_MAKESPAN.get(policy)
        print(
            f"{policy:>11} {row['sum_job_samples_per_s']:12.0f} {paper or 0:7.0f}"
            f" {row['throughput_samples_per_s']:9.0f} {row['makespan_s']:9.1f} {made or 0:6.0f}"
            f" {row['avg_jct_s']:8.1f} {row['gpu_idle_fraction']:9.1%}"
            f" {row['reallocations']:9.1f}"
        )
    print(f"\npaper-dynamic, mean of {args.seeds} seeds (paper: Fig. 8 and 9)")
    for policy, row in dynamic.items():
        if policy == BOUND:
            continue
        made = DYNAMIC_MAKESPAN.get(policy)
        print(
            f"{policy:>11} makespan {row['makespan_s']:7.1f} (paper {made or 0:5.0f})"
            f"  thr {row['throughput_samples_per_s']:6.0f}  JCT {row['avg_jct_s']:6.1f}"
            f"  reallocs {row['reallocations']:4.1f}  paused {row['pause_overhead_s']:6.1f} s"
        )
    goals = {
        "static: baselines within 15% of Fig. 3": all(
            abs(static[p]["sum_job_samples_per_s"] / FIG3[p] - 1) <= 0.15 for p in FIG3_BASELINES
        ),
        "optimal >= waa (aggregate throughput), static": static["optimal"][
            "throughput_samples_per_s"
        ]
        >= static["waa"]["throughput_samples_per_s"],
        "optimal >= waa (aggregate throughput), dynamic": dynamic["optimal"][
            "throughput_samples_per_s"
        ]
        >= dynamic["waa"]["throughput_samples_per_s"],
        "optimal >= 1.25 x balance (sum of jobs), static": static["optimal"][
            "sum_job_samples_per_s"
        ]
        >= 1.25 * static["balance"]["sum_job_samples_per_s"],
        "dynamic makespan with reallocation >= 12% below static": min(
            dynamic[p]["makespan_s"] for p in ("waa", "optimal")
        )
        <= 0.88 * dynamic["static"]["makespan_s"],
        "optimal within 3% of oracle (aggregate throughput), both": all(
            abs(
                t["optimal"]["throughput_samples_per_s"] / t[ORACLE]["throughput_samples_per_s"] - 1
            )
            <= 0.03
            for t in (static, dynamic)
        ),
    }
    ceiling = static[BOUND]["throughput_samples_per_s"]
    floor = dynamic[BOUND]["makespan_s"]
    print(
        f"\nno policy beats: paper-static {ceiling:.0f} images/s aggregate "
        f"({ceiling / static['balance']['throughput_samples_per_s']:.3f} x balance); "
        f"paper-dynamic a makespan of {floor:.1f} s "
        f"({floor / dynamic['static']['makespan_s'] - 1:+.1%} against static)"
    )
    reachable = {
        "optimal >= 1.25 x balance (aggregate throughput), static": ceiling
        >= 1.25 * static["balance"]["throughput_samples_per_s"],
        "dynamic makespan with reallocation >= 12% below static": floor
        <= 0.88 * dynamic["static"]["makespan_s"],
    }
    print()
    for goal, met in goals.items():
        print(f"{'MET ' if met else 'MISS'} {goal}")
    for goal, possible in reachable.items():
        print(f"{'    ' if possible else 'UNREACHABLE by any policy:'} {goal}")
    written = pictures(args.pictures) if args.pictures else []
    path = save(
        "paper",
        {
            "seeds": args.seeds,
            "static": static,
            "dynamic": dynamic,
            "goals": goals,
            "reachable": reachable,
            "pictures": written,
        },
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
