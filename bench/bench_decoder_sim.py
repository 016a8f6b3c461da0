"""Issue 6 in simulation: a decoder worth 20 CPU cores of decoding (DLBooster Sec. 7) on the
paper's dynamic workload. `joint` (decode mode, workers and decoder share) against CPU-only
`optimal` on the same node and truth, for the paper's 18 loader processes and for nodes with
fewer CPUs, where loading rather than the GPUs limits the jobs.

Run: .venv/bin/python -m bench.bench_decoder_sim [--seeds N]
Prints a table (means over seeds) and saves bench/out/decoder_sim.json.
"""

import argparse
import statistics

from bench.bench_paper import paper_workload
from bench.common import save
from workloads.simulator import simulate
from workloads.spec import Workload

WORKLOAD = "paper-dynamic-decoder"
CPU_WORKERS = (18, 9, 6)
POLICIES = ("optimal", "joint")
METRICS = ("makespan_s", "throughput_samples_per_s", "avg_jct_s", "reallocations")


def on_node(workload: Workload, cpu_workers: int) -> Workload:
    """The workload on a node that allows `cpu_workers` loader processes."""
    node = workload.node.model_copy(update={"cpu_workers": cpu_workers})
    return workload.model_copy(update={"node": node})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    base = paper_workload(WORKLOAD)
    rows = []
    for cpu_workers in CPU_WORKERS:
        workload = on_node(base, cpu_workers)
        for policy in POLICIES:
            runs = [simulate(workload, policy, seed).to_dict() for seed in range(args.seeds)]
            row: dict[str, object] = {"cpu_workers": cpu_workers, "policy": policy}
            for metric in METRICS:
                row[metric] = statistics.mean(float(str(run[metric])) for run in runs)
            bounds = runs[0]["bounds"]
            assert isinstance(bounds, dict)
            row["makespan_floor_s"] = bounds["makespan_s"]
            row["floor_set_by"] = bounds["binding"]
            rows.append(row)
            print(
                f"C={cpu_workers:>2} {policy:>8}: makespan {row['makespan_s']:8.1f} s"
                f"  throughput {row['throughput_samples_per_s']:7.1f} samples/s"
                f"  avg JCT {row['avg_jct_s']:7.1f} s  reallocations {row['reallocations']:4.1f}"
                f"  (floor {bounds['makespan_s']:.1f} s, {bounds['binding']})"
            )
    path = save(
        "decoder_sim",
        {"workload": WORKLOAD, "seeds": args.seeds, "decoder_cores": 20.0, "rows": rows},
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
