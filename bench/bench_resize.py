"""The resize gap of a real application master on this machine: pause received to the
first step with the new worker count, hot (process and model stay) and cold (checkpoint,
kill, a new process started from it).

Run: .venv/bin/python -m bench.bench_resize [--model smResnet20] [--rounds 5]
Prints a table and saves bench/out/resize.json. Goals (issue 5): hot under 1 s, cold under
5 s; A-Dloader reports about 16 s per round (Sec. IV-B).

- Hot: the gap the master itself measures and reports in `resumed`, and the round trip
  seen from this end (pause sent to `resumed` received, which includes the daemon's own
  decision time of zero here).
- Cold: pause sent, `paused` (checkpoint written), the process group killed, a new master
  started on the same job directory (the SDK goes on from the newest checkpoint), to its
  first heartbeat (sent right after its first step).
"""

import argparse
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

from agents.datafiles import make_dataset
from agents.protocol import (
    HeartbeatMessage,
    Hello,
    PausedMessage,
    PauseMessage,
    ResumedMessage,
    ResumeMessage,
)
from bench.agent_driver import Router, start_master
from bench.common import save

BATCH = 32


def hot(router: Router, rounds: int) -> tuple[list[float], list[float]]:
    reported, seen = [], []
    for gen in range(1, rounds + 1):
        sent = time.monotonic()
        router.send("job", PauseMessage(job="job", gen=gen))
        router.expect(PausedMessage)
        router.send("job", ResumeMessage(job="job", gen=gen, workers_per_gpu=1 + gen % 2))
        resumed = router.expect(ResumedMessage)
        seen.append(time.monotonic() - sent)
        reported.append(resumed.gap_s)
        router.expect(HeartbeatMessage)
    return reported, seen


def cold(router: Router, data: Path, out: Path, model: str, rounds: int) -> list[float]:
    gaps = []
    process = router.started[-1]
    for gen in range(100, 100 + rounds):
        sent = time.monotonic()
        router.send("job", PauseMessage(job="job", gen=gen))
        router.expect(PausedMessage)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        process = start_master(
            router, data, out, batch_size=BATCH, gpus=1, iterations=10**6, model=model,
            workers=2, heartbeat_s=0.01,
        )  # fmt: skip
        router.expect(Hello)
        router.expect(HeartbeatMessage)
        gaps.append(time.monotonic() - sent)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return gaps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="smResnet20")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stoker-resize-") as scratch:
        root = Path(scratch)
        make_dataset(root / "data", images=512, size=48, classes=10)
        router = Router(root / "agents.sock")
        out = root / "job"
        start_master(
            router, root / "data", out, batch_size=BATCH, gpus=1, iterations=10**6,
            model=args.model, workers=2, heartbeat_s=0.2,
        )  # fmt: skip
        router.expect(Hello)
        router.expect(HeartbeatMessage)
        reported, seen = hot(router, args.rounds)
        gaps = cold(router, root / "data", out, args.model, args.rounds)
        router.close()
    rows = {
        "hot, measured by the master": reported,
        "hot, pause sent to resumed received": seen,
        "cold, pause sent to first new step": gaps,
    }
    print(f"{args.model}, batch {BATCH}, 32 px crops, 1 CPU rank, {args.rounds} rounds each")
    summary = {}
    for name, values in rows.items():
        summary[name] = {
            "median_s": statistics.median(values),
            "max_s": max(values),
            "all_s": values,
        }
        print(f"  {name:<38} median {statistics.median(values):6.3f} s  max {max(values):6.3f} s")
    print(f"saved {save('resize', {'model': args.model, 'rounds': args.rounds, **summary})}")


if __name__ == "__main__":
    main()
