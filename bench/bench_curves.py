"""Plans told each job's measured curve (issue 39, item 4): on random mixes of the ten
published Synergy profiles (workloads/modern.py: samples/s per V100 GPU at 1 to 24 CPU
cores per GPU, as the authors released them), eight one-GPU jobs on an 8-GPU server with
`--cores-per-gpu` loader processes a GPU (3: the CPU-bound case the profiles were made for).

For each mix it plans the node four ways and scores each split on the measured curves
themselves (samples/s, read off the points linearly, flat past the last; one sample of
any model counts one, as the planner's objective counts it):

- `optimum`: the best integer split of those curves (a knapsack over the jobs, exact);
- `default, curves`: the default policy told each job's curve (`"profile"` in the request:
  it plans on the fitted knee, c, G and p);
- `default, c and G`: the same fit without its sharpness, the policy's default p instead
  (what the planner knew when a request could not say p);
- `balance`: the same workers for every job.

Run: .venv/bin/python -m bench.bench_curves [--mixes N] [--cores-per-gpu C]
Goal (issue 39): the default given the curves within 3 % of the optimum on average, and
never below `balance`. Prints a table and saves bench/out/curves_C.json.
"""

import argparse
import random
import statistics
from dataclasses import replace

import numpy as np

from allocator import AllocationRequest, allocate
from bench.common import save
from daemon.schemas import AllocationRequestBody
from scheduler.config import DEFAULT_POLICY
from workloads.modern import PUBLISHED, SYNERGY_CORES

GPUS = 8


def measured(model: str, workers: int) -> float:
    """Samples/s of one GPU of `model` at `workers` loader workers, off its published points."""
    rates = PUBLISHED[model].v100_samples_per_s()
    return float(np.interp(workers, (0.0, *SYNERGY_CORES), (0.0, *rates)))


def optimum(models: list[str], capacity: int) -> list[int]:
    """The split of at least one worker a job that makes the most samples/s on the curves."""
    best: dict[int, tuple[float, list[int]]] = {0: (0.0, [])}  # processes used -> best
    for model in models:
        grown: dict[int, tuple[float, list[int]]] = {}
        for used, (total, split) in best.items():
            for workers in range(1, capacity - used - (len(models) - len(split) - 1) + 1):
                key, value = used + workers, total + measured(model, workers)
                if key <= capacity and value > grown.get(key, (-1.0, []))[0]:
                    grown[key] = (value, [*split, workers])
        best = grown
    return max(best.values(), key=lambda kept: kept[0])[1]


def request(models: list[str], capacity: int, *, sharpness: bool) -> AllocationRequest:
    """The `stoker allocate` request of the mix, each job with its published curve."""
    jobs = []
    for index, model in enumerate(models):
        profile = PUBLISHED[model]
        curve = {"workers_per_gpu": SYNERGY_CORES, "samples_per_s": profile.v100_samples_per_s()}
        jobs.append(
            {"id": f"{model}-{index}", "gpus": 1, "batch_size": profile.batch_size // profile.gpus,
             "model_params": profile.model_params, "profile": curve}
        )  # fmt: skip
    body = AllocationRequestBody.model_validate({"node": {"cpu_workers": capacity}, "jobs": jobs})
    planned = body.to_request()
    if sharpness:
        return planned
    return replace(planned, jobs=tuple(replace(job, knee_sharpness=None) for job in planned.jobs))


def on_curves(models: list[str], split: list[int]) -> float:
    return sum(measured(model, workers) for model, workers in zip(models, split, strict=True))


WAYS = ("default, curves", "default, c and G", "balance")


def shares(models: list[str], capacity: int) -> dict[str, float]:
    """Each way's samples/s on the curves, as a share of the optimum's."""
    told = request(models, capacity, sharpness=True)
    plans = {
        WAYS[0]: allocate(told, DEFAULT_POLICY),
        WAYS[1]: allocate(request(models, capacity, sharpness=False), DEFAULT_POLICY),
        WAYS[2]: allocate(told, "balance"),
    }
    best = on_curves(models, optimum(models, capacity))
    return {
        way: on_curves(models, [plan.allocations[job.id].workers_per_gpu for job in told.jobs])
        / best
        for way, plan in plans.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mixes", type=int, default=30)
    parser.add_argument("--cores-per-gpu", type=int, default=3)
    args = parser.parse_args()
    capacity = GPUS * args.cores_per_gpu
    mixes = [random.Random(seed).choices(sorted(PUBLISHED), k=GPUS) for seed in range(args.mixes)]
    rows = [shares(models, capacity) for models in mixes]
    summary = {
        way: {
            "mean_of_optimum": statistics.mean(row[way] for row in rows),
            "worst_of_optimum": min(row[way] for row in rows),
            "mixes_below_balance": sum(row[way] < row["balance"] - 1e-9 for row in rows),
        }
        for way in WAYS
    }
    print(
        f"{args.mixes} mixes of {GPUS} one-GPU jobs, {capacity} loader processes"
        f" ({args.cores_per_gpu} a GPU): samples/s on the published curves, share of the optimum"
    )
    for way, said in summary.items():
        print(
            f"  {way:>18}: mean {said['mean_of_optimum']:.1%}"
            f"  worst {said['worst_of_optimum']:.1%}"
            f"  mixes below balance {said['mixes_below_balance']:.0f}"
        )
    path = save(
        f"curves_{args.cores_per_gpu}",
        {
            "goal": "the default given curves >= 97 % of the optimum on average, never below"
            " balance",
            "cores_per_gpu": args.cores_per_gpu,
            "summary": summary,
            "mixes": [{"models": m, **row} for m, row in zip(mixes, rows, strict=True)],
        },
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
