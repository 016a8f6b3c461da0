"""GPU detection through NVML. This machine has no NVIDIA driver, so the no-driver path is
the real library lookup; the counting paths replace NVML's calls, as a driver would answer."""

import pynvml
import pytest

from daemon.gpus import detect_gpus


def test_no_driver_means_no_gpus() -> None:
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        pynvml.nvmlInit()  # the premise: no libnvidia-ml here
    assert detect_gpus() == 0


def driver(monkeypatch: pytest.MonkeyPatch, count: int | Exception) -> list[str]:
    """NVML's calls answered as a driver with `count` GPUs would (or failing with it)."""
    calls: list[str] = []

    def device_count() -> int:
        calls.append("count")
        if isinstance(count, Exception):
            raise count
        return count

    monkeypatch.setattr(pynvml, "nvmlInit", lambda: calls.append("init"))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", device_count)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: calls.append("shutdown"))
    return calls


def test_gpus_are_counted_and_nvml_is_shut_down(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = driver(monkeypatch, 8)
    assert detect_gpus() == 8
    assert calls == ["init", "count", "shutdown"]


def test_a_driver_that_fails_to_count_means_cpu_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = driver(monkeypatch, pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN))
    assert detect_gpus() == 0
    assert calls == ["init", "count", "shutdown"]


def test_a_driver_not_loaded_means_cpu_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_loaded() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", not_loaded)
    assert detect_gpus() == 0
