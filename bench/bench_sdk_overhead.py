"""The SDK's per-batch cost (issue 15): a loop over `job.loader` that calls
`job.report(loss=tensor)` each step, against the same loop over a plain torch DataLoader on
the same dataset. Goal: the SDK's whole per-batch cost under 1 % of a 10 ms step (100 us).

Run: .venv/bin/python -m bench.bench_sdk_overhead [--batches 100] [--repeats 7]
     [--workers 0] [--step-ms 10] [--step sleep|busy] [--batch-size 32] [--heartbeat-s 1]
Prints a table and saves bench/out/sdk_overhead.json (--name changes the file); about a
minute with the defaults.

- Both loops run in lockstep, a plain batch and an SDK batch (each pair in the other
  order than the last), so that each pair meets the same load on the machine. After each
  batch comes a fake step of exactly --step-ms (the loss tensor, with a graph behind it,
  then a sleep, the host waiting for a GPU, or a busy wait). A batch's cost is its
  `next()` (for the SDK: the boundary, where it may pause, then the batch) plus, for the
  SDK, `job.report(loss=loss)`; measured in wall time and in main-thread CPU time (which
  leaves out the time the process waits for a CPU).
  Step 0 runs too: the loops back to back, the caches warm.
- The dataset is an in-memory TensorDataset of 3 x 32 x 32 images; a repetition is one
  epoch of --batches batches. The overhead is the median over repetitions of the epoch's
  (SDK - plain) per batch: its mean carries what comes once an epoch or once a few seconds
  (the DataLoader built, metrics flushed, heartbeats), its median batch the typical one.
- Each mode runs in a fresh Python process:
  - standalone: no STOKER_* variables (the SDK as plain PyTorch, metrics to a local file).
  - control: under a daemon-like ROUTER socket held by this process (the agent protocol
    over real ZeroMQ ipc): the SDK says hello, heartbeats every --heartbeat-s (the daemon's
    default is 1 s) and polls the link for a pause at every batch boundary.
- The cost of one `job.report(loss=tensor)` and of one boundary (`on_batch` with
  `at_boundary`, what the loader calls around each batch) is timed on its own too, each
  call after a wait of the step's length.
"""

import argparse
import functools
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import zmq

from agents.protocol import decode_agent
from bench.agent_driver import Router
from bench.common import save

GOAL_FRACTION = 0.01  # of a 10 ms step (issue 15)
GOAL_STEP_S = 0.010
HOT_CALLS = 5_000  # per-call timings, back to back
COLD_CALLS = 300  # per-call timings, each after a step


@dataclass(frozen=True)
class Step:
    """A fake training step of exactly `seconds` after the batch arrives: the loss tensor,
    then a busy wait (a CPU-bound step) or a sleep (the host waiting for a GPU)."""

    seconds: float
    busy: bool

    def __call__(self, images: Any) -> Any:
        end = time.perf_counter() + self.seconds
        loss = images.requires_grad_().mean()  # with a graph behind it, as a real loss
        self.wait(end)
        return loss

    def wait(self, end: float) -> None:
        """Until `end` (perf_counter seconds)."""
        if self.busy:
            while time.perf_counter() < end:
                pass
        elif (left := end - time.perf_counter()) > 0:
            time.sleep(left)


@dataclass
class Costs:
    """What getting each batch cost one loop, in seconds (wall, main-thread CPU)."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def add(self, wall: float, cpu: float, *, onto_last: bool = False) -> None:
        if onto_last:
            self.wall[-1] += wall
            self.cpu[-1] += cpu
        else:
            self.wall.append(wall)
            self.cpu.append(cpu)


def timed(call: Callable[[], Any]) -> tuple[Any, float, float]:
    """`call()`'s value (None for StopIteration), wall and main-thread CPU seconds."""
    wall, cpu = time.perf_counter(), time.thread_time()
    try:
        value = call()
    except StopIteration:
        value = None
    return value, time.perf_counter() - wall, time.thread_time() - cpu


def lockstep_epoch(
    plain: Iterable[Any], sdk: Iterable[Any], step: Step, report: Callable[..., None]
) -> tuple[Costs, Costs]:
    """One epoch of both loaders in lockstep: a plain batch and its step, an SDK batch, its
    step and `report(loss=...)`, then the other way round, and so on, so that each pair of
    batches meets the same load on the machine and neither always goes first (with workers,
    the first one's worker starts on its next batch while the second is fetched). A batch's
    cost is its `next()` (for the SDK: the boundary, then the batch) plus, for the SDK, the
    report; the first includes `iter()`, the last the `next()` that ends the epoch (the
    SDK's last boundary)."""
    costs = Costs(), Costs()
    batches: list[Iterator[Any]] = []
    for loader, cost in zip((plain, sdk), costs, strict=True):
        made, wall, cpu = timed(loader.__iter__)
        batches.append(made)
        cost.wall.append(wall)
        cost.cpu.append(cpu)
    for pair in itertools.count():
        ended = []
        for index in (0, 1) if pair % 2 == 0 else (1, 0):
            batch, wall, cpu = timed(batches[index].__next__)
            costs[index].add(wall, cpu, onto_last=pair == 0 or batch is None)
            ended.append(batch is None)
            if batch is None:
                continue
            loss = step(batch[0])
            if index == 1:
                _, wall, cpu = timed(functools.partial(report, loss=loss))
                costs[index].add(wall, cpu, onto_last=True)
        if any(ended):
            if not all(ended):
                raise RuntimeError("the plain and the SDK epochs differ in length")
            break
    return costs


def per_call(call: Callable[[], object], calls: int, step: Step) -> dict[str, float]:
    """`call()`'s median wall and mean main-thread CPU microseconds, each call after a wait
    of the step's length (none for step 0: back to back, the caches warm)."""
    wall, cpu = [], []
    for _ in range(calls):
        step.wait(time.perf_counter() + step.seconds)
        _, spent_wall, spent_cpu = timed(call)
        wall.append(spent_wall)
        cpu.append(spent_cpu)
    return {
        "wall_median_us": statistics.median(wall) * 1e6,
        "cpu_mean_us": statistics.mean(cpu) * 1e6,
    }


def child(args: argparse.Namespace) -> None:
    """One mode's measurements in this process (STOKER_* as the parent set them), written
    to measured.json in its output directory."""
    import torch  # noqa: PLC0415 (the parent process never needs torch)
    from torch.utils.data import DataLoader, TensorDataset  # noqa: PLC0415

    import stoker  # noqa: PLC0415

    samples = args.batches * args.batch_size
    generator = torch.Generator().manual_seed(0)
    dataset = TensorDataset(
        torch.randn(samples, 3, 32, 32, generator=generator),
        torch.randint(0, 10, (samples,), generator=generator),
    )
    torch.set_num_threads(1)  # the loops' own cost, not OpenMP's barriers on a busy machine
    job = stoker.init(output_dir=args.output_dir)
    sdk = job.loader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    plain = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    loss = torch.tensor(0.5)

    def boundary() -> None:  # what the loader calls between two batches
        job.on_batch(args.batch_size)
        job.at_boundary()

    result: dict[str, Any] = {"batches_per_epoch": len(plain)}
    for step_ms in step_lengths(args):
        step = Step(step_ms / 1000, busy=args.step == "busy")
        job.checkpoint()  # flushes the metrics: no phase flushes those of another
        lockstep_epoch(plain, sdk, step, job.report)  # warm-up
        epochs = [lockstep_epoch(plain, sdk, step, job.report) for _ in range(args.repeats)]
        calls = HOT_CALLS if step_ms == 0 else COLD_CALLS
        reports = per_call(lambda: job.report(loss=loss), calls, step)
        job.checkpoint()
        boundaries = per_call(boundary, calls, step)
        result[f"step_{step_ms:g}ms"] = {
            "epochs": [
                {"plain": asdict(plain_costs), "sdk": asdict(sdk_costs)}
                for plain_costs, sdk_costs in epochs
            ],
            "report": reports,
            "boundary": boundaries,
        }
    (args.output_dir / "measured.json").write_text(json.dumps(result))


def step_lengths(args: argparse.Namespace) -> list[float]:
    """The fake steps measured: none (the loop alone), and --step-ms."""
    return sorted({0.0, args.step_ms})


def run_mode(args: argparse.Namespace, mode: str, scratch: Path) -> dict[str, Any]:
    """Run `mode` in a fresh process; under `control`, hold the daemon's end meanwhile."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("STOKER_")}
    router = None
    if mode == "control":
        router = Router(scratch / "agents.sock")
        env |= {
            "STOKER_JOB_ID": "bench",
            "STOKER_CONTROL": router.endpoint,
            "STOKER_GEN": "1",
            "STOKER_HEARTBEAT_S": str(args.heartbeat_s),
            "STOKER_JOB_DIR": str(scratch / mode / "job"),
        }
    argv = [
        sys.executable, "-m", "bench.bench_sdk_overhead", "--child",
        "--output-dir", str(scratch / mode), "--batches", str(args.batches),
        "--repeats", str(args.repeats), "--workers", str(args.workers),
        "--step-ms", str(args.step_ms), "--step", args.step,
        "--batch-size", str(args.batch_size),
    ]  # fmt: skip
    process = subprocess.Popen(argv, env=env)
    received: Counter[str] = Counter()
    while process.poll() is None:
        if router is not None and router.socket.poll(200, zmq.POLLIN):
            _, data = router.socket.recv_multipart()
            received[decode_agent(data).type] += 1
        elif router is None:
            time.sleep(0.2)
    if router is not None:
        router.close()
    if process.returncode != 0:
        raise SystemExit(f"{mode}: the measuring process exited with {process.returncode}")
    measured: dict[str, Any] = json.loads((scratch / mode / "measured.json").read_text())
    measured["messages_received"] = dict(received)
    return measured


MEASURES = {
    "cpu_mean": "main-thread CPU, mean over the epoch's batches",
    "wall_mean": "wall time, mean over the epoch's batches",
    "wall_median": "wall time, median batch of the epoch",
}


def epoch_overheads(epoch: dict[str, dict[str, list[float]]]) -> dict[str, float]:
    """One epoch's SDK - plain cost per batch, in microseconds, by measure. The means carry
    what comes once an epoch or once a few seconds (the DataLoader built, metrics flushed,
    heartbeats); the median is the typical batch, and the CPU time leaves out the time the
    process waited for the CPU."""
    plain, sdk = epoch["plain"], epoch["sdk"]
    batches = len(plain["wall"])
    wall = [s - p for p, s in zip(plain["wall"], sdk["wall"], strict=True)]
    return {
        "cpu_mean": (sum(sdk["cpu"]) - sum(plain["cpu"])) / batches * 1e6,
        "wall_mean": sum(wall) / batches * 1e6,
        "wall_median": statistics.median(wall) * 1e6,
    }


def summarise(epochs: list[dict[str, dict[str, list[float]]]]) -> dict[str, Any]:
    """Per measure: the median over the epochs of the SDK's overhead per batch, its
    min and max, and the median as a percentage of a 10 ms step; with the loops' own
    median costs per batch."""
    per_epoch = [epoch_overheads(epoch) for epoch in epochs]
    summary: dict[str, Any] = {
        "plain_batch_cpu_us": statistics.median(
            statistics.mean(epoch["plain"]["cpu"]) * 1e6 for epoch in epochs
        ),
        "sdk_batch_cpu_us": statistics.median(
            statistics.mean(epoch["sdk"]["cpu"]) * 1e6 for epoch in epochs
        ),
    }
    for measure in MEASURES:
        values = [overheads[measure] for overheads in per_epoch]
        summary[measure] = {
            "overhead_us": statistics.median(values),
            "min_us": min(values),
            "max_us": max(values),
            "percent_of_10ms": statistics.median(values) / (GOAL_STEP_S * 1e6) * 100,
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=100, help="per epoch (a repetition)")
    parser.add_argument("--repeats", type=int, default=7, help="repetitions of each loop")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    parser.add_argument("--step-ms", type=float, default=10.0, help="the fake step")
    parser.add_argument("--step", choices=("sleep", "busy"), default="sleep")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--heartbeat-s", type=float, default=1.0, help="under the daemon")
    parser.add_argument("--modes", default="standalone,control")
    parser.add_argument("--name", default="sdk_overhead", help="bench/out/NAME.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--output-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="stoker-sdk-overhead-") as scratch:
        for mode in modes:
            results[mode] = run_mode(args, mode, Path(scratch))
    goal_us = GOAL_FRACTION * GOAL_STEP_S * 1e6
    print(
        f"batch {args.batch_size}, {args.batches} batches an epoch, {args.workers} workers, "
        f"{args.step} steps, {args.repeats} repetitions; microseconds per batch, medians; "
        f"goal: SDK - plain under {goal_us:.0f} us (1 % of 10 ms)"
    )
    summary: dict[str, Any] = {}
    for mode, measured in results.items():
        summary[mode] = {"messages_received": measured["messages_received"]}
        for step_ms in step_lengths(args):
            taken = measured[f"step_{step_ms:g}ms"]
            rows = summarise(taken["epochs"])
            rows["report"], rows["boundary"] = taken["report"], taken["boundary"]
            summary[mode][f"step_{step_ms:g}ms"] = rows
            print(
                f"  {mode}, {step_ms:g} ms step: CPU per batch, plain "
                f"{rows['plain_batch_cpu_us']:.1f} us, SDK {rows['sdk_batch_cpu_us']:.1f} us"
            )
            for measure, label in MEASURES.items():
                row = rows[measure]
                print(
                    f"    overhead, {label:<46} {row['overhead_us']:7.1f} us "
                    f"[{row['min_us']:.1f} .. {row['max_us']:.1f}] "
                    f"= {row['percent_of_10ms']:.2f} % of 10 ms"
                )
            for call in ("report", "boundary"):
                print(
                    f"    one {call:<8} call: wall {rows[call]['wall_median_us']:.1f} us "
                    f"(median), CPU {rows[call]['cpu_mean_us']:.1f} us (mean)"
                )
        print(f"  {mode}: messages from the job {measured['messages_received']}")
    step_key = f"step_{args.step_ms:g}ms"
    met = all(
        summary[mode][step_key][measure]["overhead_us"] < goal_us
        for mode in summary
        for measure in ("cpu_mean", "wall_median")
    )
    print(f"goal {'met' if met else 'NOT met'} at a {args.step_ms:g} ms step")
    payload = {
        "batches": args.batches,
        "repeats": args.repeats,
        "workers": args.workers,
        "batch_size": args.batch_size,
        "step": args.step,
        "step_ms": args.step_ms,
        "heartbeat_s": args.heartbeat_s,
        "goal_us": goal_us,
        "goal_met": met,
        "summary": summary,
        "raw": results,
    }
    print(f"saved {save(args.name, payload)}")


if __name__ == "__main__":
    main()
