"""The decoder service as a node runs it: `stoker decoder serve` in a subprocess, and loader
processes that use it (`python -m fpga_driver.loadgen`, which saturates the device for a job
and prints its block names, then keeps going until killed)."""

import os
import subprocess
from pathlib import Path

from fpga_driver.loadgen import start_loader as loader
from fpga_driver.loadgen import start_service as serve
from fpga_driver.loadgen import stop_service as stop
from fpga_driver.pool import PREFIX

__all__ = ["BATCH", "SIZE", "endpoint", "kill", "loader", "our_segments", "serve", "stop"]

BATCH = 16
SIZE = 32


def kill(process: "subprocess.Popen[str]") -> None:
    """Kill a loader and close our end of its pipe."""
    process.kill()
    process.wait()
    if process.stdout is not None:
        process.stdout.close()


def endpoint(state_dir: Path) -> str:
    return f"ipc://{state_dir / 'decoder.sock'}"


def our_segments() -> set[str]:
    """The service's shared-memory blocks that exist now."""
    return {name for name in os.listdir("/dev/shm") if name.startswith(PREFIX)}
