"""Fit time of the throughput model on 1,000 training and 1,000 loading samples.

Run: .venv/bin/python -m bench.bench_tpm_fit [--samples N] [--repeats N]
Goal: a 1,000-sample fit (all four training candidates validated on a 60/40 split, the
segmented regression validated the same way, both refitted) in under 1 s. Samples come
from the ground-truth generator tpm/synthetic.py (knees at 11 and 24 workers, 5 % noise).
Prints the result as JSON and saves bench/out/tpm_fit.json.
"""

import argparse
import json
import os
import statistics
import sys
import time
from functools import partial

import numpy
import sklearn

from bench.common import save, time_call
from tpm import fit, read_loading_samples, read_training_samples
from tpm.synthetic import loading_csv, training_csv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=1000, help="of each kind")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    training_text = training_csv(args.samples, seed=args.seed)
    loading_text = loading_csv(args.samples, seed=args.seed + 1)
    started = time.perf_counter()
    training = read_training_samples(training_text, "bench-train.csv")
    loading = read_loading_samples(loading_text, "bench-load.csv")
    parse_seconds = time.perf_counter() - started
    timings = time_call(partial(fit, training, loading, seed=args.seed), args.repeats)
    report = fit(training, loading, seed=args.seed).report
    training_report, loading_report = report["training"], report["loading"]
    assert isinstance(training_report, dict)
    assert isinstance(loading_report, dict)
    result: dict[str, object] = {
        "benchmark": "tpm fit",
        "command": " ".join(["python -m bench.bench_tpm_fit", *sys.argv[1:]]),
        "cpus": os.cpu_count(),
        "numpy": numpy.__version__,
        "scikit_learn": sklearn.__version__,
        "training_samples": args.samples,
        "loading_samples": args.samples,
        "repeats": args.repeats,
        "parse_seconds": parse_seconds,
        "median_fit_seconds": statistics.median(timings),
        "max_fit_seconds": max(timings),
        "fit_seconds": timings,
        "chosen_training_candidate": training_report["chosen"],
        "training_r2": training_report["candidates"],
        "loading_r2": loading_report["r2"],
        "breakpoints": loading_report["breakpoints"],
    }
    path = save("tpm_fit", result)
    sys.stdout.write(json.dumps(result, indent=2) + f"\nsaved {path}\n")


if __name__ == "__main__":
    main()
