"""The daemon's footprint: how long `stoker serve` takes to answer /healthz, and how much
memory it holds then, for this tree or another checkout (to compare before and after).

Run: .venv/bin/python -m bench.bench_footprint [--runs N] [--tree PATH] [--name LABEL]
Prints a table and saves bench/out/footprint-<LABEL>.json. `--tree` runs the daemon of
another checkout of the repository with this environment (its `cli` package, or the older
`daemon.cli`); nothing is installed. One more start comes first and is not counted: it
writes the tree's bytecode caches (the daemon runs with PYTHONDONTWRITEBYTECODE unset), so
that every counted start finds them, as an installed package does. Goal (issue 14): the
daemon loads neither torch nor matplotlib.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import psutil
import tomli_w

from bench.common import save
from bench.daemon_driver import free_port

HERE = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "matplotlib")


@dataclass(frozen=True)
class Start:
    """One daemon's start: spawn to the first 200 from /healthz, and its memory then."""

    start_s: float
    rss_mib: float
    uss_mib: float  # memory only this process holds (not shared with others)
    loads: dict[str, bool]  # torch, matplotlib: is any file of theirs mapped


def cli_module(tree: Path) -> str:
    """The module that runs the `stoker` command in `tree`."""
    return "cli" if (tree / "cli" / "__init__.py").is_file() else "daemon.cli"


def mapped_files(pid: int, scratch: Path) -> set[str]:
    """The files the process has mapped (libraries, extension modules), its state aside."""
    rows = (line.split(maxsplit=5) for line in Path(f"/proc/{pid}/maps").read_text().splitlines())
    return {row[5] for row in rows if len(row) == 6 and not row[5].startswith(str(scratch))}


def one_start(tree: Path, scratch: Path) -> Start:
    """Start a daemon of `tree`, wait for /healthz, measure, stop it."""
    port = free_port()
    config = scratch / "stoker.toml"
    config.write_text(tomli_w.dumps({"agent_mode": "simulate", "node": {"cpu_slots": 4}}))
    argv = [
        sys.executable, "-m", cli_module(tree), "serve",
        "--config", str(config), "--state-dir", str(scratch / "state"),
        "--port", str(port), "--log-level", "warning",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    started = time.perf_counter()
    with (scratch / "daemon.log").open("ab") as log:
        process = subprocess.Popen(argv, cwd=tree, env=env, stdout=log, stderr=log)
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the daemon exited; see {scratch / 'daemon.log'}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.02)
        start_s = time.perf_counter() - started
        memory = psutil.Process(process.pid).memory_full_info()
        files = mapped_files(process.pid, scratch)
        return Start(
            start_s=start_s,
            rss_mib=memory.rss / 2**20,
            uss_mib=memory.uss / 2**20,
            loads={name: any(name in path for path in files) for name in HEAVY},
        )
    finally:
        process.terminate()
        process.wait(timeout=60)


def fresh_start(tree: Path) -> Start:
    """`one_start` in an empty scratch directory, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="stoker-footprint-") as scratch:
        return one_start(tree, Path(scratch))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tree", type=Path, default=HERE, help="a checkout of the repository")
    parser.add_argument("--name", default="this-tree", help="label of the result file")
    args = parser.parse_args()
    tree = args.tree.resolve()
    fresh_start(tree)  # writes the tree's bytecode caches; not counted
    runs = [fresh_start(tree) for _ in range(args.runs)]
    loads = {name: any(run.loads[name] for run in runs) for name in HEAVY}
    summary: dict[str, object] = {
        "tree": str(tree),
        "module": cli_module(tree),
        "median_start_s": statistics.median(run.start_s for run in runs),
        "median_rss_mib": statistics.median(run.rss_mib for run in runs),
        "median_uss_mib": statistics.median(run.uss_mib for run in runs),
        "loads": loads,
        "runs": [asdict(run) for run in runs],
    }
    print(f"{args.name}: {tree} (python -m {cli_module(tree)} serve)")
    print(f"  start to /healthz  {summary['median_start_s']:.2f} s (median of {args.runs})")
    print(f"  RSS                {summary['median_rss_mib']:.0f} MiB")
    print(f"  USS                {summary['median_uss_mib']:.0f} MiB")
    for name in HEAVY:
        print(f"  loads {name:<12} {loads[name]}")
    print(f"saved {save(f'footprint-{args.name}', summary)}")


if __name__ == "__main__":
    main()
