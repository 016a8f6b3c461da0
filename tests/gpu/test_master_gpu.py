"""The application master on a real GPU: NCCL with one rank, pinned memory, a hot resize.
Marked `gpu`; skipped where CUDA is not available (this project's CI and dev machines)."""

from pathlib import Path

import pytest
import torch

from agents.datafiles import make_dataset
from agents.protocol import (
    FinishedMessage,
    Hello,
    PausedMessage,
    PauseMessage,
    ResumedMessage,
    ResumeMessage,
)
from bench.agent_driver import Router, start_master

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.timeout(300),
]


def test_a_resnet18_trains_pauses_and_resizes_on_the_gpu(tmp_path: Path) -> None:
    make_dataset(tmp_path / "data", images=512, size=64, classes=10)
    router = Router(tmp_path / "agents.sock")
    try:
        process = start_master(
            router, tmp_path / "data", tmp_path / "job", batch_size=64, gpus=1,
            iterations=200, model="Resnet18", workers=2, image_size="64",
        )  # fmt: skip
        assert router.expect(Hello).state == "running"
        router.send("job", PauseMessage(job="job", gen=1))
        router.expect(PausedMessage)
        router.send("job", ResumeMessage(job="job", gen=1, workers_per_gpu=4))
        resumed = router.expect(ResumedMessage)
        assert resumed.workers == 4 and resumed.gap_s < 5
        assert router.expect(FinishedMessage, timeout_s=240).iteration == 200
        assert process.wait(timeout=60) == 0
    finally:
        router.close()
