"""How many GPUs the node has, asked of `nvidia-smi` (no CUDA library in the daemon)."""

import logging
import shutil
import subprocess

log = logging.getLogger(__name__)


def detect_gpus() -> int:
    """The node's NVIDIA GPUs; 0 when nvidia-smi is absent or fails (a CPU-only node)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        done = subprocess.run(
            [smi, "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as error:
        log.warning("nvidia-smi failed (%s): running with CPU training slots", error)
        return 0
    return sum(1 for line in done.stdout.splitlines() if line.strip())
