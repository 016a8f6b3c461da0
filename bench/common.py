"""Shared helpers for benchmarks: timing and writing the JSON result."""

import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parent / "out"


def time_call(call: Callable[[], object], repeats: int) -> list[float]:
    """Wall-clock seconds of `repeats` calls, after one warm-up call."""
    call()
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        timings.append(time.perf_counter() - start)
    return timings


def save(name: str, payload: dict[str, object]) -> Path:
    """Write `payload` with the machine it ran on to bench/out/<name>.json."""
    OUT_DIR.mkdir(exist_ok=True)
    path = OUT_DIR / f"{name}.json"
    payload = {"machine": platform.platform(), "python": platform.python_version(), **payload}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path
