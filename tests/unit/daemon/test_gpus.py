"""GPU detection through nvidia-smi, with a stand-in script where no GPU exists (here)."""

import stat
from pathlib import Path

import pytest

from daemon.gpus import detect_gpus


def fake_smi(directory: Path, body: str) -> None:
    script = directory / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_no_nvidia_smi_means_no_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_gpus() == 0


def test_one_line_per_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_smi(tmp_path, 'printf "0\\n1\\n2\\n"')
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_gpus() == 3


def test_a_failing_nvidia_smi_means_cpu_slots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_smi(tmp_path, "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_gpus() == 0
