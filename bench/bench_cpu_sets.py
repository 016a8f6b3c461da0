"""Per-job CPU sets on real jobs (issue 16, item 4): the demo's workload through a live
daemon under the default policy, with and without `node.cpu_sets`, several times.

Run: .venv/bin/python -m bench.bench_cpu_sets [--runs 3] [--workload W.toml]
Prints each run and the medians, saves bench/out/cpu_sets_<workload>.json. About 40 s a run and
setting with the demo's workload (4 minutes with the defaults); nothing else should run
meanwhile. The two settings take turns first from run to run. Each run is
bench/bench_live_gain.py's: a fresh daemon as `stoker demo` starts it, the workload
submitted on its schedule, the makespan from the first submission to the last completion.
"""

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from agents.datafiles import make_dataset
from bench.common import save
from bench.live_run import DEMO_WORKLOAD, run_once
from scheduler.config import DEFAULT_POLICY
from workloads.spec import load_workload

SETTINGS = {"shared": False, "cpu sets": True}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workload", type=Path, default=DEMO_WORKLOAD)
    args = parser.parse_args()
    jobs = load_workload(args.workload)
    scratch = Path(tempfile.mkdtemp(prefix="stoker-cpu-sets-"))
    dataset = scratch / "data"
    make_dataset(dataset, images=256, size=48, classes=10)  # as the demo makes it
    measured: dict[str, list[dict[str, Any]]] = {name: [] for name in SETTINGS}
    names = list(SETTINGS)
    for run in range(args.runs):
        for name in names if run % 2 == 0 else names[::-1]:
            where = scratch / f"run{run}-{name.replace(' ', '-')}"
            found = run_once(jobs, dataset, DEFAULT_POLICY, where, cpu_sets=SETTINGS[name])
            measured[name].append(found)
            print(f"run {run + 1} {name:<9} makespan {found['makespan_s']:6.1f} s, "
                  f"{found['samples_per_s']:6.1f} samples/s, CPUs busy {found['cpu_busy']:.0%},"
                  f" {found['states']}", flush=True)  # fmt: skip
    medians = {
        name: statistics.median(found["makespan_s"] for found in runs)
        for name, runs in measured.items()
    }
    gain = medians["shared"] / medians["cpu sets"] - 1
    print(f"\nmedian makespan: shared {medians['shared']:.1f} s, cpu sets "
          f"{medians['cpu sets']:.1f} s: cpu sets {gain:+.1%}")  # fmt: skip
    path = save(
        f"cpu_sets_{args.workload.stem}",
        {"workload": str(args.workload), "policy": DEFAULT_POLICY, "runs": measured,
         "median_makespan_s": medians, "gain": gain},
    )  # fmt: skip
    print(f"saved {path}")


if __name__ == "__main__":
    main()
