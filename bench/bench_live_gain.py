"""The gain on real jobs (issue 16, item 7): the same workload of real PyTorch jobs run on
this node through a live daemon under `balance` and under the default policy, several
times, with the makespan and throughput measured, beside what the simulator predicts for
the same workload under each policy, and beside the gain the default policy's own plans
predicted over `balance`.

Run: .venv/bin/python -m bench.bench_live_gain [--runs 3] [--workload W.toml] [--images N] [--gate]
[--floor]. Prints a table, saves bench/out/live_gain[_gate].json. About 40 s a run and
policy with the demo's workload (4 minutes with the defaults); nothing else should run
meanwhile.

Each run starts a fresh daemon as `stoker demo` does (its node, 2-s windows, the gate off
unless `--gate`, real application masters on the demo's JPEG dataset), submits the workload on its
schedule and waits for every job to end. The makespan is from the first submission to
the last completion, in the daemon's event clock; the throughput is every job's samples
(iterations x batch) over it; `cpu_busy` is the share of the machine's CPU time that was
not idle from the daemon's start to the last job's end (psutil), `cpu_busy_planned` the same
from the first plan on (the arrival window closed, which every policy waits alike): what
putting that idle share to work would gain (a split can also gain by wasting less). The
policies take turns first from run to run, so that a drift of the machine does not favour
one. The prediction is the default policy's own: each of its plans says when it expects
the jobs to end under it and under `balance`'s split (allocator/lookahead.py), on the
curves the jobs taught the daemon; the bench takes the first plan whose split is not
`balance`'s (up to it the two runs are the same) and adds the time until then to both
(workloads/live.py). The simulated figures are `workloads.simulator` on the workload's own
node and truth: the paper's testbed, not this CPU, so only its gain is comparable; it
ignores the jobs' own images (`image_px`, `read_latency_ms`).

Each run also reads the CPU seconds each job's processes used (bench/job_cpu.py). With
`--floor` the bench then runs each job alone at every loader count the node allows it (1
to C / its GPUs per GPU, under `balance`, which gives a lone job all of them) and keeps the
fewest CPU seconds it needed: no policy's makespan can be shorter than the arrival window
plus all jobs' fewest seconds (alone or in any run of the workload) over the CPUs' worth of
time the node may use (daemon/host.py), on the assumption that a job needs no fewer CPU
seconds than the fewest it was seen to need. On a node whose CPUs both train and load,
that estimates the bound on a split's gain (an estimate: a job's seconds vary from run to
run, and beside others they were once fewer than alone). The daemon's own CPU seconds in
a run (heartbeats, plans, this bench's requests) are read too, and a second bound adds the
least of them.
"""

import argparse
import statistics
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.common import save
from bench.live_run import DEMO_WORKLOAD, make_datasets, run_once
from daemon.host import cpu_limit
from scheduler.config import DEFAULT_POLICY
from workloads.live import OwnImages, dataset_images
from workloads.simulator import simulate
from workloads.spec import Workload, load_workload


def measure_floor(
    jobs: Workload, dataset: Path, datasets: Mapping[OwnImages, Path], scratch: Path
) -> dict[str, dict[int, float]]:
    """Each job alone on the node at every loader count per GPU the node allows it: the CPU
    seconds it used at each, by job and count."""
    used: dict[str, dict[int, float]] = {}
    for job in jobs.jobs:
        used[job.id] = {}
        for workers in range(1, jobs.node.cpu_workers // job.gpus + 1):  # per GPU
            alone = jobs.model_copy(
                update={
                    "jobs": (job.model_copy(update={"arrival_s": 0.0}),),
                    "node": jobs.node.model_copy(update={"cpu_workers": workers * job.gpus}),
                }
            )
            where = scratch / f"alone-{job.id}-{workers}"
            found = run_once(alone, dataset, "balance", where, datasets=datasets)
            given = {split["workers"][job.id] for split in found["plans"]}
            assert given == {workers}, f"{job.id} alone was given {given}, not {workers}"
            used[job.id][workers] = found["cpu_s"][job.id]
            print(f"{job.id} alone, {workers} loader workers per GPU: "
                  f"{used[job.id][workers]:.1f} CPU s, {found['makespan_s']:.1f} s",
                  flush=True)  # fmt: skip
    return used


def report_floor(
    jobs: Workload,
    dataset: Path,
    datasets: Mapping[OwnImages, Path],
    scratch: Path,
    measured: Mapping[str, list[dict[str, Any]]],
) -> dict[str, Any]:
    """`--floor`: each job alone at every loader count, and the bound on a split's gain
    over `balance` that gives."""
    used = measure_floor(jobs, dataset, datasets, scratch)
    # The fewest seconds each job was seen to need, alone or beside the others.
    beside = [found["cpu_s"] for runs in measured.values() for found in runs]
    fewest = {
        job: min([*by_count.values(), *(spent[job] for spent in beside)])
        for job, by_count in used.items()
    }
    cores = cpu_limit().cpus
    shortest, bound = floor_gain(measured["balance"], sum(fewest.values()), cores)
    print(f"every job's fewest CPU seconds: {sum(fewest.values()):.1f} on {cores:g} "
          f"CPUs: no makespan below {shortest:.1f} s, no gain over balance above "
          f"{bound:+.1%}")  # fmt: skip
    # The daemon serves its jobs under any policy: the least it spent in a run, added.
    serving = min(found["daemon_cpu_s"] for runs in measured.values() for found in runs)
    served, served_bound = floor_gain(measured["balance"], sum(fewest.values()) + serving, cores)
    print(f"with the daemon's own {serving:.1f} CPU s (the least of any run): no makespan "
          f"below {served:.1f} s, no gain above {served_bound:+.1%}")  # fmt: skip
    return {
        "alone_cpu_s": used,
        "fewest_cpu_s": fewest,
        "cores": cores,
        "shortest_makespan_s": shortest,
        "bound_gain": bound,
        "daemon_cpu_s": serving,
        "shortest_served_makespan_s": served,
        "served_bound_gain": served_bound,
    }


def floor_gain(
    balance_runs: list[dict[str, Any]], floor_s: float, cores: float
) -> tuple[float, float]:
    """The shortest makespan any policy could have (the median window, then every job's
    fewest CPU seconds on `cores` CPUs kept busy) and what it gains over `balance`'s median
    makespan."""
    window = statistics.median(found["window_s"] for found in balance_runs)
    shortest = window + floor_s / cores
    makespan = statistics.median(found["makespan_s"] for found in balance_runs)
    return shortest, makespan / shortest - 1.0


def _idle_gain(found: Mapping[str, Any]) -> float:
    """What putting a run's idle CPU to work would shorten it by: the arrival window is
    waited under any policy; after it, every idle CPU second in use. Not a bound on a
    split's gain: a split also changes the CPU seconds the jobs need (batches made ahead
    and thrown away at a resize or at a job's end; docs/results.md, item 7)."""
    window, makespan = found["window_s"], found["makespan_s"]
    shortest = window + (makespan - window) * found["cpu_busy_planned"]
    return float(makespan / shortest - 1.0)


def _positive(text: str) -> int:
    """An argparse type: a whole number of 1 or more."""
    number = int(text)
    if number < 1:
        raise argparse.ArgumentTypeError(f"{number} is not 1 or more")
    return number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workload", type=Path, default=DEMO_WORKLOAD)
    parser.add_argument(
        "--images",
        type=_positive,
        help="JPEGs in each dataset [the workload's dataset_images, else 256]",
    )
    parser.add_argument(
        "--gate",
        action="store_true",
        help="the reallocation gate on, as the daemon's default (the demo runs without it)",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="then run each job alone at every loader count: the bound on any split's gain",
    )
    args = parser.parse_args()
    jobs = load_workload(args.workload)
    policies = ("balance", DEFAULT_POLICY)
    scratch = Path(tempfile.mkdtemp(prefix="stoker-live-gain-"))
    images = dataset_images(jobs, args.images)
    dataset, own = make_datasets(jobs, scratch, images)
    measured: dict[str, list[dict[str, Any]]] = {policy: [] for policy in policies}
    for run in range(args.runs):
        for policy in policies if run % 2 == 0 else policies[::-1]:
            where = scratch / f"run{run}-{policy}"
            found = run_once(jobs, dataset, policy, where, datasets=own, gate=args.gate)
            measured[policy].append(found)
            rate, busy = found["samples_per_s"], found["cpu_busy"]
            told = found["predicted_gain"]
            plans = "" if told is None else f", its plan predicted {told:+.1%} over balance"
            print(f"run {run + 1} {policy:<8} makespan {found['makespan_s']:6.1f} s, "
                  f"{rate:6.1f} samples/s, CPUs busy {busy:.0%}, {found['states']}{plans}",
                  flush=True)  # fmt: skip
    predicted = {policy: simulate(jobs, policy) for policy in policies}
    summary: dict[str, Any] = {}
    for policy in policies:
        makespans = [found["makespan_s"] for found in measured[policy]]
        summary[policy] = {
            "makespan_s": makespans,
            "median_makespan_s": statistics.median(makespans),
            "median_samples_per_s": statistics.median(
                found["samples_per_s"] for found in measured[policy]
            ),
            "simulated_makespan_s": predicted[policy].makespan_s,
        }
    base, ours = summary["balance"], summary[DEFAULT_POLICY]
    gain = base["median_makespan_s"] / ours["median_makespan_s"] - 1
    simulated_gain = base["simulated_makespan_s"] / ours["simulated_makespan_s"] - 1
    told_by = (found["predicted_gain"] for found in measured[DEFAULT_POLICY])
    planned = [told for told in told_by if told is not None]
    predicted_gain = statistics.median(planned) if planned else None
    wins = sum(
        b["makespan_s"] > o["makespan_s"]
        for b, o in zip(measured["balance"], measured[DEFAULT_POLICY], strict=True)
    )
    print(f"\n{'policy':<9}{'makespans (s)':>26}{'median':>9}{'samples/s':>11}{'simulated':>11}")
    for policy in policies:
        row = summary[policy]
        spans = ", ".join(f"{value:.1f}" for value in row["makespan_s"])
        median, rate = row["median_makespan_s"], row["median_samples_per_s"]
        print(f"{policy:<9}{spans:>26}{median:>9.1f}{rate:>11.1f}"
              f"{row['simulated_makespan_s']:>11.1f}")  # fmt: skip
    told = "none" if predicted_gain is None else f"{predicted_gain:+.1%}"
    print(f"\nmeasured gain of {DEFAULT_POLICY} over balance (median makespan): {gain:+.1%}; "
          f"{DEFAULT_POLICY} shorter in {wins} of {args.runs} runs; predicted by its plans "
          f"(median): {told}; simulated on the workload's own testbed: {simulated_gain:+.1%}. "
          "Goal: +10 % or more in 3 runs of 3, the prediction within 5 points.")  # fmt: skip
    if own:
        print("(the simulator ignores image_px and read_latency_ms: its gain is the testbed's)")
    # Training and loading share this node's CPUs: a split of the loaders moves CPU time
    # between jobs, and gains by putting `balance`'s idle share to work, or by wasting less.
    loose = statistics.median(1.0 / found["cpu_busy"] - 1.0 for found in measured["balance"])
    idle = statistics.median(_idle_gain(found) for found in measured["balance"])
    print(f"what putting balance's idle CPU to work would gain, once planned (median): "
          f"{idle:+.1%} (its idle CPU from the daemon's start, arrival window included: "
          f"{loose:+.1%})")  # fmt: skip
    for policy in policies:
        spent = ", ".join(
            f"{sum(found['cpu_s'].values()):.1f} (daemon {found['daemon_cpu_s']:.1f}, bench "
            f"{found['bench_cpu_s']:.1f})"
            for found in measured[policy]
        )
        print(f"{policy}: the jobs' CPU seconds, run by run: {spent}")
    floor = report_floor(jobs, dataset, own, scratch, measured) if args.floor else None
    path = save(
        "live_gain_gate" if args.gate else "live_gain",
        {
            "workload": str(args.workload),
            "dataset_images": images,
            "gate": args.gate,
            "runs": measured,
            "summary": summary,
            "measured_gain": gain,
            "predicted_gain": predicted_gain,
            "simulated_gain": simulated_gain,
            "default_wins": wins,
            "idle_gain": idle,
            "idle_gain_whole_run": loose,
            "floor": floor,
        },
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
