"""How many GPUs the node has, asked of NVML (nvidia-ml-py): the driver's own library, no
CUDA and no torch in the daemon."""

import logging

import pynvml

log = logging.getLogger(__name__)


def detect_gpus() -> int:
    """The node's NVIDIA GPUs; 0 when there is no driver or NVML fails (a CPU-only node,
    which then trains in CPU slots)."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        log.info("no NVIDIA driver (NVML not found): running with CPU training slots")
        return 0
    except pynvml.NVMLError as error:
        log.warning("NVML failed to start (%s): running with CPU training slots", error)
        return 0
    try:
        count: int = pynvml.nvmlDeviceGetCount()
        return count
    except pynvml.NVMLError as error:
        log.warning("NVML cannot count GPUs (%s): running with CPU training slots", error)
        return 0
    finally:
        pynvml.nvmlShutdown()
