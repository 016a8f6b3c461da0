"""The simulator at scale: the whole Gavel trace replayed onto one node, and a sweep of
random synthetic workloads with every policy measured against `oracle`.

Run: .venv/bin/python -m bench.bench_simulate [--workloads 100] [--processes N]
Prints two tables, saves bench/out/simulate.json.

Trace: `replay_trace` with its defaults (4 GPUs, 18 loader processes, docs/workloads.md),
simulated once per policy. The time counts loading the workload, profiling the node and
fitting its TPM, and the whole run, as `stoker simulate` spends them.

Sweep: workload i is `generate_workload(GeneratorOptions(jobs=..., seed=i))` on the same
node, simulated with seed i under every policy. Each policy's aggregate throughput and
makespan are divided by `oracle`'s on the same workload; the table gives the geometric mean
and the worst and best ratios over the workloads.
"""

import argparse
import math
import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from bench.common import save
from workloads import ORACLE
from workloads.generator import GeneratorOptions, generate_workload
from workloads.simulator import simulate
from workloads.trace import ReplayOptions, replay_trace

TRACE_POLICIES = ("static", "balance", "waa", "optimal", ORACLE)
SWEEP_POLICIES = ("static", "balance", "proportion", "inverse", "waa", "optimal", "fair", ORACLE)
TRACE_GOAL_S = 60.0


@dataclass(frozen=True)
class Outcome:
    """One workload under one policy."""

    throughput: float  # samples/s over the makespan
    makespan_s: float
    avg_jct_s: float


def replay(policy: str) -> dict[str, float]:
    """The trace under `policy`, timed from reading the file to the last job's end."""
    start = time.perf_counter()
    workload = replay_trace(options=ReplayOptions())
    result = simulate(workload, policy)
    seconds = time.perf_counter() - start
    return {
        "jobs": float(len(workload.jobs)),
        "seconds": seconds,
        "makespan_s": result.makespan_s,
        "throughput_samples_per_s": result.throughput_samples_per_s,
        "avg_jct_s": result.avg_jct_s,
        "reallocations": float(result.reallocations),
    }


def sweep_one(seed: int, jobs: int) -> dict[str, Outcome]:
    """Workload `seed` under every sweep policy."""
    workload = generate_workload(GeneratorOptions(jobs=jobs, seed=seed))
    outcomes = {}
    for policy in SWEEP_POLICIES:
        result = simulate(workload, policy, seed)
        outcomes[policy] = Outcome(
            result.throughput_samples_per_s, result.makespan_s, result.avg_jct_s
        )
    return outcomes


def ratios(runs: Sequence[dict[str, Outcome]], policy: str, metric: str) -> dict[str, float]:
    """Geometric mean, worst and best of `policy`'s metric over `oracle`'s."""
    values = [
        getattr(run[policy], metric) / getattr(run[ORACLE], metric)
        for run in runs
        if getattr(run[ORACLE], metric) > 0
    ]
    return {
        "geomean": math.exp(sum(math.log(v) for v in values) / len(values)),
        "min": min(values),
        "max": max(values),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workloads", type=int, default=100, help="random workloads to sweep")
    parser.add_argument("--jobs", type=int, default=20, help="jobs per random workload")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--skip-trace", action="store_true")
    args = parser.parse_args()

    trace: dict[str, dict[str, float]] = {}
    if not args.skip_trace:
        print("Gavel trace replayed onto 4 GPUs and 18 loader processes")
        print(f"{'policy':>9} {'jobs':>6} {'seconds':>8} {'makespan s':>11} {'samples/s':>10}")
        for policy in TRACE_POLICIES:
            row = trace[policy] = replay(policy)
            print(
                f"{policy:>9} {row['jobs']:6.0f} {row['seconds']:8.1f}"
                f" {row['makespan_s']:11.0f} {row['throughput_samples_per_s']:10.1f}"
            )

    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.processes) as pool:
        runs = list(pool.map(sweep_one, range(args.workloads), [args.jobs] * args.workloads))
    sweep_seconds = time.perf_counter() - start
    optimal_vs_waa = sum(
        run["optimal"].throughput >= run["waa"].throughput * (1 - 1e-9) for run in runs
    )
    optimal_near_waa = sum(
        run["optimal"].throughput >= run["waa"].throughput * 0.99 for run in runs
    )
    table = {
        policy: {
            "throughput": ratios(runs, policy, "throughput"),
            "makespan": ratios(runs, policy, "makespan_s"),
            "avg_jct": ratios(runs, policy, "avg_jct_s"),
        }
        for policy in SWEEP_POLICIES
    }
    print(
        f"\n{args.workloads} random workloads of {args.jobs} jobs, against oracle"
        f" (geomean [worst, best]); {sweep_seconds:.0f} s"
    )
    print(f"{'policy':>10} {'throughput':>24} {'makespan':>24} {'avg JCT':>24}")
    for policy, spread in table.items():
        cells = [
            f"{r['geomean']:.3f} [{r['min']:.3f}, {r['max']:.3f}]"
            for r in (spread["throughput"], spread["makespan"], spread["avg_jct"])
        ]
        print(f"{policy:>10} {cells[0]:>24} {cells[1]:>24} {cells[2]:>24}")
    print(
        f"optimal >= waa in throughput on {optimal_vs_waa} of {args.workloads} workloads,"
        f" within 1 % of it or better on {optimal_near_waa}"
    )
    goals = {
        f"trace replay under {TRACE_GOAL_S:.0f} s, every policy": bool(trace)
        and all(row["seconds"] < TRACE_GOAL_S for row in trace.values()),
    }
    for goal, met in goals.items():
        print(f"{'MET ' if met else 'MISS'} {goal}")
    path = save(
        "simulate",
        {
            "trace": trace,
            "sweep": {
                "workloads": args.workloads,
                "jobs": args.jobs,
                "seconds": sweep_seconds,
                "ratios_to_oracle": table,
                "optimal_at_least_waa": optimal_vs_waa,
                "optimal_within_1pct_of_waa_or_better": optimal_near_waa,
            },
            "goals": goals,
        },
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
