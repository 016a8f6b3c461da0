"""Accuracy of the throughput model over many seeds and several ground truths.

Run: .venv/bin/python -m bench.bench_tpm_accuracy [--seeds N]
For each truth and sample count, fits on samples drawn with 5 % multiplicative noise and
reports the held-out R^2 of the training and loading rates (the fit's own validation) and
R^2 on 500 fresh samples, and how far each learned knee lies from the truth. Goal (issue 2):
R^2 >= 0.97 (training) and >= 0.99 (loading), knees within 2 workers. Saves
bench/out/tpm_accuracy.json.
"""

import argparse
import math
import sys

import numpy as np

from bench.common import save
from tpm import fit
from tpm.synthetic import LoadingTruth, loading_samples, training_samples

TRUTHS = {
    "knees 11/24 (paper Fig. 5)": LoadingTruth(),
    "knees 6/16": LoadingTruth(contention_from=6.0, saturation_from=16.0),
    "knee 11, no saturation in range": LoadingTruth(saturation_from=None),
}


def r2(predicted: np.ndarray, measured: np.ndarray) -> float:
    residual = float(((measured - predicted) ** 2).sum())
    return 1.0 - residual / float(((measured - measured.mean()) ** 2).sum())


def knee_error(learned: object, truth: float | None) -> float:
    if truth is None:
        return 0.0 if learned is None else math.inf
    return math.inf if learned is None else abs(float(str(learned)) - truth)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    rows = []
    for name, truth in TRUTHS.items():
        for count in (100, 200, 1000):
            held_train, held_load, fresh_train, fresh_load, knees = [], [], [], [], []
            meeting = 0
            for seed in range(args.seeds):
                result = fit(
                    training_samples(count, seed),
                    loading_samples(count, seed + 1000, truth=truth),
                    seed=seed,
                )
                report = result.report
                training, loading = report["training"], report["loading"]
                assert isinstance(training, dict) and isinstance(loading, dict)
                chosen = training["candidates"][training["chosen"]]
                held_train.append(float(chosen["r2"]))
                held_load.append(float(loading["r2"]))
                fresh_t = training_samples(500, seed + 5000)
                fresh_l = loading_samples(500, seed + 6000, truth=truth)
                assert fresh_t.step_time_s is not None and fresh_l.load_rate is not None
                fresh_train.append(r2(result.model.predict_training(fresh_t), fresh_t.step_time_s))
                fresh_load.append(r2(result.model.predict_loading(fresh_l), fresh_l.load_rate))
                learned = loading["breakpoints"]
                assert isinstance(learned, list)
                knees.append(
                    max(
                        knee_error(learned[0], truth.contention_from),
                        knee_error(learned[1], truth.saturation_from),
                    )
                )
                meeting += held_train[-1] >= 0.97 and held_load[-1] >= 0.99 and knees[-1] <= 2
            row = {
                "truth": name,
                "samples": count,
                "seeds": args.seeds,
                "min_heldout_r2_training": min(held_train),
                "min_heldout_r2_loading": min(held_load),
                "min_fresh_r2_training": min(fresh_train),
                "min_fresh_r2_loading": min(fresh_load),
                "max_knee_error_workers": max(knees),
                "seeds_meeting_all_goals": meeting,
            }
            rows.append(row)
            print(
                f"{name:>32} n={count:>4}: held-out R2 train {row['min_heldout_r2_training']:.4f}"
                f" load {row['min_heldout_r2_loading']:.4f}; fresh R2 train"
                f" {row['min_fresh_r2_training']:.4f} load {row['min_fresh_r2_loading']:.4f};"
                f" worst knee error {row['max_knee_error_workers']:.2f};"
                f" {meeting}/{args.seeds} seeds meet all goals"
            )
    path = save("tpm_accuracy", {"command": " ".join(sys.argv), "rows": rows})
    print(f"saved {path}")


if __name__ == "__main__":
    main()
