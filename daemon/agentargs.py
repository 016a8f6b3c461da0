"""The command line of a job's agent: the PyTorch application master (`process` mode) or a
simulated one that trains nothing (`simulate` mode)."""

import sys
from dataclasses import dataclass
from pathlib import Path

from allocator import JobSpec
from daemon.config import DaemonConfig
from daemon.jobspec import JobSettings
from scheduler.messages import Allocation


@dataclass(frozen=True)
class AgentLaunch:
    """One start of a job's agent."""

    job_id: str
    settings: JobSettings
    gen: int
    allocation: Allocation
    resume_from: str  # checkpoint to start from; "" for a fresh start
    job_dir: Path
    dataset: Path | None  # process mode: the folder it trains on
    predicted: JobSpec | None  # simulate mode: the rates it pretends to have
    paused_at: float | None = None  # a cold resize: when its predecessor paused (epoch s)


def agent_argv(config: DaemonConfig, launch: AgentLaunch, endpoint: str, decoder: str) -> list[str]:
    settings = launch.settings
    allocation = launch.allocation
    common = [
        "--job", launch.job_id,
        "--endpoint", endpoint,
        "--iterations", str(settings.iterations),
        "--batch-size", str(settings.batch_size),
        "--gpus", str(settings.gpus),
        "--workers", str(allocation.workers_per_gpu),
        "--decode-mode", allocation.decode_mode,
        "--decoder-share", repr(allocation.decoder_share),
        "--decoder-endpoint", decoder,
        "--gen", str(launch.gen),
        "--checkpoint-dir", str(launch.job_dir),
        "--heartbeat-s", str(config.heartbeat_s),
    ]  # fmt: skip
    if launch.resume_from:
        common += ["--resume-from", launch.resume_from]
    if launch.paused_at is not None:
        common += ["--paused-at", repr(launch.paused_at)]
    if config.agent_mode == "process":
        training = config.training
        argv = [
            sys.executable, "-m", "agents.master", *common,
            "--model", settings.model,
            "--dataset", str(launch.dataset),
            "--image-size", str(training.image_size),
            "--seed", str(training.seed),
        ]  # fmt: skip
        if settings.resize == "cold":
            argv.append("--cold-resize")
        return [*argv, "--audit"] if settings.audit_samples else argv
    assert launch.predicted is not None
    simulated = config.simulated
    scale = simulated.time_scale
    return [
        sys.executable, "-m", "agents.simulated", *common,
        "--step-time-s", str(launch.predicted.step_time_s * scale),
        "--sample-cost-s", str(launch.predicted.sample_cost_s * scale),
        "--pause-s", str(simulated.pause_s * scale),
        "--resume-s", str(simulated.resume_s * scale),
    ]  # fmt: skip
