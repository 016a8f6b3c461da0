"""Does the default policy ever lose to `balance` or `static`? (issue 16, item 5)

Run: .venv/bin/python -m bench.bench_never_lose [--workloads 100] [--skip-trace] [--window S]
     [--tie X] [--knee-gain X] [--policy NAME] [--noiseless]
Simulates paper-dynamic, the Gavel trace replayed onto the paper's node, and generated
workloads of 12 jobs (seeds 1..N) under the default policy, `optimal`, `balance` and
`static`, with the simulator's pause costs (drawn around 9 s pause and 7 s resume; the core
plans with each job's measured cost once it has paused, 16 s before). Prints every workload
where the default's makespan or average JCT is more than 0.5 % above `balance`'s or
`static`'s, the count, and the geometric means; saves bench/out/never_lose.json. About a
minute, most of it the trace. `--window S` sets both the arrival and the completion window
(paper: 30 s, the default) on every workload, and saves never_lose_windowS.json. `--tie`
and `--knee-gain` set `lookahead`'s tie margin and knee gain (allocator/lookahead.py,
`_TIE` and `KNEE_GAIN`, 0.01 each) for the run, to see how the losing set moves with them
(docs/results.md, item 5); they add _tieX and _kneeX to the file's name. `--policy NAME`
holds another policy against the baselines in the default's place: `oracle:lookahead`, the
default told every running job's true curve, shows what is left when the plan's predictions
are right (it adds _NAME to the file's name). `--noiseless` runs every generated workload in
a world without noise (no measurement noise, fixed costs, every job exactly as the truth
says; adds _noiseless): with `--policy oracle:lookahead`, what is left is what the plan
could not know, the jobs still to come.
"""

import argparse
import math
import statistics
from pathlib import Path

from allocator import lookahead
from bench.common import save
from scheduler.config import DEFAULT_POLICY
from workloads.generator import GeneratorOptions, generate_workload
from workloads.simulator import simulate
from workloads.spec import Workload, load_workload
from workloads.trace import ReplayOptions, replay_trace

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "workloads"
BASELINES = ("balance", "static")
TIE = 0.005  # the allowance for ties
NOISELESS = {"rate_noise": 0.0, "cost_jitter": 0.0, "step_noise": 0.0}  # `[truth]` keys


def geometric_mean(values: list[float]) -> float:
    return math.exp(statistics.mean(math.log(value) for value in values))


def losses(row: dict[str, list[float]], policy: str) -> list[str]:
    """What `policy` loses on this workload, beyond the tie allowance."""
    ours = row[policy]
    found = []
    for baseline in BASELINES:
        for index, metric in enumerate(("makespan", "average JCT")):
            if ours[index] > row[baseline][index] * (1.0 + TIE):
                change = ours[index] / row[baseline][index] - 1.0
                found.append(f"{metric} {change:+.1%} against {baseline}")
    return found


def main() -> None:
    args = _parse_args()
    held: str = args.policy
    policies = (held, "optimal", "balance", "static")
    if args.tie is not None:
        lookahead._TIE = args.tie
    if args.knee_gain is not None:
        lookahead.KNEE_GAIN = args.knee_gain
    rows, lost = _simulate_all(_workloads(args), policies, held)
    generated = [name for name in rows if name.startswith("generated")]
    means = {
        policy: [
            geometric_mean([rows[name][policy][index] for name in generated]) for index in (0, 1)
        ]
        for policy in policies
    }
    print(f"\n{held} loses on {len(lost)} of {len(rows)} workloads (beyond {TIE:.1%})")
    # The two fixed splits against each other, on the same draws: the spread a policy that
    # were either of them would show.
    spread = {
        f"{one} later than {other}": sum(
            any(row[one][i] > row[other][i] * (1.0 + TIE) for i in (0, 1)) for row in rows.values()
        )
        for one, other in (BASELINES, BASELINES[::-1])
    }
    print("; ".join(f"{what} on {count}" for what, count in spread.items()))
    _print_named(rows)
    print(f"geometric means over {len(generated)} generated workloads (makespan / average JCT, s):")
    for policy, (makespan, jct) in means.items():
        print(f"  {policy:<10} {makespan:8.1f} / {jct:6.1f}")
    path = save(
        f"never_lose{_suffix(args, held)}",
        {
            "default_policy": DEFAULT_POLICY,
            "policy": held,
            "noiseless": args.noiseless,
            "tie": TIE,
            "window_s": args.window,
            "lookahead_tie": lookahead._TIE,
            "lookahead_knee_gain": lookahead.KNEE_GAIN,
            "workloads": rows,
            "losses": lost,
            "baselines_against_each_other": spread,
            "geometric_means_generated": means,
        },
    )
    print(f"saved {path}")


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=100, help="generated, seeds 1..N")
    parser.add_argument("--skip-trace", action="store_true")
    parser.add_argument("--window", type=float, help="arrival and completion windows, s")
    parser.add_argument("--tie", type=float, help="lookahead's tie margin (_TIE)")
    parser.add_argument("--knee-gain", type=float, help="lookahead's KNEE_GAIN")
    parser.add_argument("--policy", default=DEFAULT_POLICY, help="held against the baselines")
    parser.add_argument("--noiseless", action="store_true", help="generated workloads, no noise")
    return parser.parse_args()


def _workloads(args: argparse.Namespace) -> list[tuple[str, Workload]]:
    """paper-dynamic, the Gavel trace unless `--skip-trace`, and the generated workloads
    (without noise with `--noiseless`), each with `--window`'s windows if given."""
    seeds = range(1, args.workloads + 1)
    workloads: list[tuple[str, Workload]] = [
        ("paper-dynamic", load_workload(CONFIGS / "paper-dynamic.toml"))
    ]
    if not args.skip_trace:
        workloads.append(("gavel-trace", replay_trace(options=ReplayOptions())))
    drawn = [generate_workload(GeneratorOptions(jobs=12, seed=seed)) for seed in seeds]
    if args.noiseless:
        drawn = [w.model_copy(update={"truth": {**w.truth, **NOISELESS}}) for w in drawn]
    workloads += [(f"generated-seed{seed}", w) for seed, w in zip(seeds, drawn, strict=True)]
    if args.window is not None:
        windows = {"arrival_window_s": args.window, "completion_window_s": args.window}
        workloads = [
            (name, w.model_copy(update={"scheduler": {**w.scheduler, **windows}}))
            for name, w in workloads
        ]
    return workloads


def _simulate_all(
    workloads: list[tuple[str, Workload]], policies: tuple[str, ...], held: str
) -> tuple[dict[str, dict[str, list[float]]], dict[str, list[str]]]:
    """Each workload under each policy: its makespan and average JCT by policy, and what
    `held` loses where it loses (printed as found)."""
    rows: dict[str, dict[str, list[float]]] = {}
    lost: dict[str, list[str]] = {}
    for name, workload in workloads:
        results = {policy: simulate(workload, policy) for policy in policies}
        rows[name] = {p: [r.makespan_s, r.avg_jct_s] for p, r in results.items()}
        if found := losses(rows[name], held):
            lost[name] = found
            print(f"{name:<22} {'; '.join(found)}", flush=True)
    return rows, lost


def _print_named(rows: dict[str, dict[str, list[float]]]) -> None:
    """The named workloads' makespan and average JCT under each policy."""
    for name in ("paper-dynamic", "gavel-trace"):
        if name in rows:
            cells = "  ".join(f"{p}: {m:,.0f} / {j:,.0f}" for p, (m, j) in rows[name].items())
            print(f"{name}: {cells}")


def _suffix(args: argparse.Namespace, held: str) -> str:
    """What the saved file's name adds for the options that changed the run."""
    suffix = "" if args.window is None else f"_window{args.window:g}"
    suffix += "" if args.tie is None else f"_tie{args.tie:g}"
    suffix += "" if args.knee_gain is None else f"_knee{args.knee_gain:g}"
    suffix += "" if held == DEFAULT_POLICY else "_" + held.replace(":", "-")
    suffix += "_noiseless" if args.noiseless else ""
    return suffix


if __name__ == "__main__":
    main()
