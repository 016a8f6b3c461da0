"""Honest ends under load (issue 36): real SDK jobs (examples/tabular.py) four at a time on
this machine, with CPU burners beside them, under a daemon of the default configuration
(its node given four CPU slots). A run passes when every job ends as its own files say
(completed exactly when its finished marker was written, failed or cancelled otherwise),
none is taken for lost while its process lives, and none is relaunched.

    python -m bench.bench_honest_ends [--runs 10] [--jobs 4] [--burners 2]

Prints one JSON object (and saves it to bench/out/honest_ends.json): each run's jobs with
their state, reason, restarts and marker, and the runs that failed the check.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agents.protocol import read_finished_marker
from bench.daemon_driver import Daemon, free_port, wait_for

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
OUT = Path(__file__).resolve().parent / "out" / "honest_ends.json"
FINAL = ("completed", "failed", "cancelled")


def one_run(state_dir: Path, jobs: int, burners: int, epochs: int = 3) -> list[dict[str, Any]]:
    """Start a daemon, `burners` busy loops and `jobs` tabular jobs at once; each job's end
    against its own evidence."""
    daemon = Daemon(state_dir, free_port(), {"node": {"cpu_slots": jobs}}).start()
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(burners)]
    try:
        with daemon.client() as client:
            body = {
                "command": [sys.executable, "tabular.py", "--epochs", str(epochs)],
                "workdir": str(EXAMPLES),
                "batch_size": 64,
            }
            ids = [
                client.post("/v1/jobs", json={**body, "name": f"load{n}"}).json()["id"]
                for n in range(jobs)
            ]
            wait_for(
                "every job's end",
                lambda: all(client.get(f"/v1/jobs/{i}").json()["state"] in FINAL for i in ids),
                timeout_s=600,
            )
            return [_judged(client.get(f"/v1/jobs/{i}").json(), client, state_dir) for i in ids]
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
        daemon.stop()


def _judged(job: dict[str, Any], client: Any, state_dir: Path) -> dict[str, Any]:
    marker = read_finished_marker(state_dir / "jobs" / job["id"])
    events = client.get(f"/v1/jobs/{job['id']}/events").json()
    reasons = [event["data"].get("why", "") for event in events if event["kind"] == "state"]
    lost = any(why.startswith("lost") for why in reasons)
    honest = (job["state"] == "completed") == (marker is not None) and not lost
    return {
        "id": job["id"],
        "state": job["state"],
        "reason": job["reason"],
        "restarts": job["restarts"],
        "iteration": job["iteration"],
        "finished_marker": marker,
        "taken_for_lost": lost,
        "honest": honest and job["restarts"] == 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--burners", type=int, default=2, help="busy loops beside the jobs")
    args = parser.parse_args()
    runs = []
    started = time.monotonic()
    for number in range(args.runs):
        with tempfile.TemporaryDirectory() as folder:
            runs.append(one_run(Path(folder) / "state", args.jobs, args.burners))
        print(f"run {number + 1}: {[job['state'] for job in runs[-1]]}", file=sys.stderr)
    result = {
        "runs": args.runs,
        "jobs": args.jobs,
        "burners": args.burners,
        "seconds": round(time.monotonic() - started, 1),
        "dishonest_runs": [n for n, run in enumerate(runs) if not all(j["honest"] for j in run)],
        "ends": runs,
    }
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
