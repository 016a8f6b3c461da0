"""How much of item 5's "each of 100" is the runs' own spread? (issue 16, item 5)

Run: .venv/bin/python -m bench.bench_noise_floor [--workloads 100] [--draws 5]
Item 5 asks the default policy to end no later than `balance` and `static` on each of 100
generated workloads, allowing 0.5 % for ties. A simulated run draws its measurement noise,
its pause, resume and launch costs, and each job's own speed off the TPM's prediction from
one seed; the same policy on the same workload ends elsewhere with another seed. This bench
measures that spread against the allowance, on the generated workloads of
`bench.bench_never_lose`:

- each policy against itself: how often a run with another draw ends more than 0.5 % later
  than draw 0 (makespan or average JCT), the median and 90th percentile of the change;
- the default against the baselines draw by draw, and on the mean of each workload's draws;
- the same workloads in a world without noise (no measurement noise, fixed costs, every
  job exactly as the TPM's truth says), where what the default loses is its own choice.

Saves bench/out/noise_floor.json. About two minutes for 100 workloads and 5 draws.
"""

import argparse
import statistics

from bench.bench_never_lose import BASELINES, NOISELESS, TIE
from bench.common import save
from scheduler.config import DEFAULT_POLICY
from workloads.generator import GeneratorOptions, generate_workload
from workloads.simulator import simulate
from workloads.spec import Workload

POLICIES = (DEFAULT_POLICY, *BASELINES)
Outcome = tuple[float, float]  # makespan, average JCT


def later(ours: Outcome, theirs: Outcome) -> bool:
    """Whether `ours` ends later than `theirs` beyond the tie allowance, in either figure."""
    return any(mine > other * (1.0 + TIE) for mine, other in zip(ours, theirs, strict=True))


def run(workload: Workload, policy: str, draw: int) -> Outcome:
    """One simulated run of `workload` under `policy`, its noise drawn from seed `draw`."""
    result = simulate(workload, policy, seed=draw)
    return result.makespan_s, result.avg_jct_s


def mean(outcomes: list[Outcome]) -> Outcome:
    """The mean makespan and the mean average JCT of several runs."""
    return statistics.mean(o[0] for o in outcomes), statistics.mean(o[1] for o in outcomes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=100, help="generated, seeds 1..N")
    parser.add_argument("--draws", type=int, default=5, help="noise seeds 0..K-1 per run")
    args = parser.parse_args()
    if args.draws < 2:
        parser.error("--draws: at least 2 (a run against itself needs another draw)")
    seeds = range(1, args.workloads + 1)
    self_later = {policy: 0 for policy in POLICIES}
    self_change: dict[str, list[float]] = {policy: [] for policy in POLICIES}
    draw_losses = 0
    mean_losses: list[int] = []
    noiseless_losses: list[int] = []
    for seed in seeds:
        workload = generate_workload(GeneratorOptions(jobs=12, seed=seed))
        runs = {p: [run(workload, p, draw) for draw in range(args.draws)] for p in POLICIES}
        for policy, outcomes in runs.items():
            for outcome in outcomes[1:]:
                self_later[policy] += later(outcome, outcomes[0])
                self_change[policy].append(abs(outcome[0] / outcomes[0][0] - 1.0))
        for draw in range(args.draws):
            draw_losses += any(later(runs[DEFAULT_POLICY][draw], runs[b][draw]) for b in BASELINES)
        if any(later(mean(runs[DEFAULT_POLICY]), mean(runs[b])) for b in BASELINES):
            mean_losses.append(seed)
        truth = {**workload.truth, **NOISELESS}
        quiet = workload.model_copy(update={"truth": truth})
        noiseless = {p: run(quiet, p, 0) for p in POLICIES}
        if any(later(noiseless[DEFAULT_POLICY], noiseless[b]) for b in BASELINES):
            noiseless_losses.append(seed)
    pairs = len(seeds) * (args.draws - 1)
    spread = {
        policy: {
            "later_than_draw_0": self_later[policy] / pairs,
            "median_makespan_change": statistics.median(changes),
            "p90_makespan_change": statistics.quantiles(changes, n=10)[-1],
        }
        for policy, changes in self_change.items()
    }
    print(f"{len(seeds)} workloads x {args.draws} draws; tie allowance {TIE:.1%}")
    print("each policy against itself with another draw:")
    for policy, row in spread.items():
        print(
            f"  {policy:<10} later than draw 0 in {row['later_than_draw_0']:.0%} of pairs; "
            f"makespan moves {row['median_makespan_change']:.2%} (median), "
            f"{row['p90_makespan_change']:.2%} (90th percentile)"
        )
    share = draw_losses / (len(seeds) * args.draws)
    print(f"{DEFAULT_POLICY} later than a baseline, draw by draw: {share:.0%} of runs")
    print(f"on the mean of each workload's draws: {len(mean_losses)} lose {mean_losses}")
    print(f"without noise: {len(noiseless_losses)} lose {noiseless_losses}")
    path = save(
        "noise_floor",
        {
            "default_policy": DEFAULT_POLICY,
            "tie": TIE,
            "draws": args.draws,
            "self_spread": spread,
            "default_later_share_by_draw": share,
            "default_loses_on_mean": mean_losses,
            "default_loses_without_noise": noiseless_losses,
        },
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
