"""How a job's processes start: a command job's ranks with the environment contract
(docs/sdk.md); a zoo job's the same way, its command the built-in zoo trainer (an SDK
script, `python -m agents.zoo`); or, in `simulate` mode, a zoo job's simulated agent, which
trains nothing."""

import os
import shlex
import shutil
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agents.protocol import CHECKPOINTS, PROTOCOL_VARIABLE, SECRET_VARIABLE, VERSION
from allocator import JobSpec
from daemon.config import TASKSET, DaemonConfig
from daemon.jobspec import JobSettings
from daemon.launcher import RankProcess
from daemon.tenants import UnixUser
from scheduler.messages import Allocation

# What a job sees of the daemon's own environment; everything else (tokens, the daemon's
# settings, cloud credentials) stays with the daemon.
PASSED_ON = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
# Where the daemon's own code is: the zoo trainer is imported from there, whatever the
# job's working directory.
SOURCE_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class AgentLaunch:
    """One start of a job's agent."""

    job_id: str
    settings: JobSettings
    gen: int
    allocation: Allocation
    resume_from: str  # simulate mode: checkpoint to start from; "" for a fresh start
    job_dir: Path
    dataset: Path | None  # a zoo job's (not simulated): the folder it trains on
    predicted: JobSpec | None  # simulate mode: the rates it pretends to have
    paused_at: float | None = None  # a cold resize: when its predecessor paused (epoch s)
    attempt: int = 0  # restarts used before this launch
    gpu_indices: tuple[int, ...] = ()
    uses_gpus: bool = False
    threads: int = 1  # intra-op threads of each rank: its slot's share of the node's cores
    user: UnixUser | None = None  # the tenant's unix user, which the job runs as
    cpus: tuple[int, ...] = ()  # `node.cpu_sets`: the CPUs its ranks run on; (): any
    secret: str = field(default="", repr=False)  # what its agent's messages carry; never logged
    # The first job of its lineage (`continuing.lineage`): a job that goes on from an ended
    # one audits into that one's folder, one audit across its continuations.
    lineage_root: str = ""


def command_ranks(
    config: DaemonConfig,
    launch: AgentLaunch,
    endpoint: str,
    daemon_env: Mapping[str, str],
    decoder: str = "",
) -> list[RankProcess]:
    """One process per rank of a command job (a zoo job's command: `zoo_command`), each
    with the same argv and the torchrun and STOKER_* variables; of the daemon's
    environment only `PASSED_ON`. `decoder` is the node's decoder service, if any."""
    settings = launch.settings
    command = settings.command if settings.command is not None else zoo_command(config, launch)
    if launch.cpus:  # its loader workers inherit the set from the rank that starts them
        # taskset by the daemon's path to it (the config checked it is on the daemon's
        # PATH): the job's env may set a PATH without it
        taskset = shutil.which(TASKSET) or TASKSET
        command = (taskset, "--cpu-list", ",".join(map(str, launch.cpus)), *command)
    job_dir = launch.job_dir
    placed = ",".join(str(index) for index in launch.gpu_indices)
    common = {
        **_passed_on(daemon_env),
        # Its output reaches `stoker logs` as it is printed, not when a buffer fills (a
        # Python writing to a file buffers 8 KiB); a job's env may set it otherwise.
        "PYTHONUNBUFFERED": "1",
        **dict(settings.env),
        "STOKER_JOB_ID": launch.job_id,
        "STOKER_ATTEMPT": str(launch.attempt),
        "STOKER_CONTROL": endpoint,
        "STOKER_GEN": str(launch.gen),
        "STOKER_WORKERS": str(launch.allocation.workers_per_gpu),
        "STOKER_HEARTBEAT_S": repr(config.heartbeat_s),
        PROTOCOL_VARIABLE: str(VERSION),  # the SDK speaks it, and no newer
        "STOKER_JOB_DIR": str(job_dir),
        "STOKER_OUTPUT_DIR": str(job_dir / "output"),
        "STOKER_CHECKPOINT_DIR": str(job_dir / CHECKPOINTS),
        "WORLD_SIZE": str(settings.gpus),
        "LOCAL_WORLD_SIZE": str(settings.gpus),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "OMP_NUM_THREADS": str(launch.threads),
        ("CUDA_VISIBLE_DEVICES" if launch.uses_gpus else "STOKER_CPU_SLOTS"): placed,
    }
    if settings.checkpoint_every_s is not None:
        common["STOKER_CHECKPOINT_EVERY_S"] = repr(settings.checkpoint_every_s)
    if launch.secret:  # in the environment, never on a command line others can read
        common[SECRET_VARIABLE] = launch.secret
    user = launch.user
    if user is not None:  # its own home and name, not the daemon's
        common.update(HOME=user.home, USER=user.name, LOGNAME=user.name)
    common.update(_allocation_env(launch, decoder))
    if settings.command is None:  # the zoo trainer, from the daemon's own code
        common["PYTHONPATH"] = str(SOURCE_ROOT)
    if settings.audit_samples:  # the SDK writes it (agents/audit.py)
        common["STOKER_AUDIT_DIR"] = str(
            job_dir.parent / (launch.lineage_root or launch.job_id) / "audit"
        )
    if settings.continue_from is not None:  # read by the job, as its user: never by the daemon
        common["STOKER_CONTINUE_FROM"] = str(job_dir.parent / settings.continue_from / CHECKPOINTS)
    workdir = Path(settings.workdir) if settings.workdir else job_dir
    return [
        RankProcess(
            argv=command,
            env={**common, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            workdir=workdir,
            user=user,
        )
        for rank in range(settings.gpus)
    ]


def zoo_command(config: DaemonConfig, launch: AgentLaunch) -> tuple[str, ...]:
    """A zoo job's command: the built-in trainer, the same on every launch."""
    settings, training = launch.settings, config.training
    assert settings.model is not None and settings.iterations is not None  # a zoo job
    return (
        sys.executable, "-m", "agents.zoo",
        "--model", settings.model,
        "--dataset", str(launch.dataset),
        "--iterations", str(settings.iterations),
        "--batch-size", str(settings.batch_size),
        "--seed", str(training.seed),
        *(("--image-size", str(training.image_size)) if training.image_size else ()),
    )  # fmt: skip


def _allocation_env(launch: AgentLaunch, decoder: str) -> dict[str, str]:
    """The decoder part of the job's allocation, the node's decoder service, and how the
    job resizes: a cold one exits after a pause's checkpoint and is started again, told when
    that pause came."""
    allocation = launch.allocation
    env = {
        "STOKER_DECODE_MODE": allocation.decode_mode,
        "STOKER_DECODER_SHARE": repr(allocation.decoder_share),
        "STOKER_RESIZE": launch.settings.resize,
    }
    if decoder:
        env["STOKER_DECODER"] = decoder
    if launch.paused_at is not None:
        env["STOKER_PAUSED_AT"] = repr(launch.paused_at)
    return env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def agent_env(daemon_env: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    """A simulated agent's whole environment: of the daemon's only `PASSED_ON`, the
    daemon's code on the path, the protocol version it reads, and `own`."""
    return {
        **_passed_on(daemon_env),
        "PYTHONPATH": str(SOURCE_ROOT),
        PROTOCOL_VARIABLE: str(VERSION),
        **own,
    }


def _passed_on(daemon_env: Mapping[str, str]) -> dict[str, str]:
    """What a job sees of the daemon's environment: `PASSED_ON`, where set."""
    return {name: daemon_env[name] for name in PASSED_ON if name in daemon_env}


# What to do about a program not on the PATH a job runs with: submit's refusal and the
# launch's reason say it alike.
PATH_FIX = "give the program's full path, or start `stoker serve` with it on PATH"


def job_path(settings: JobSettings, daemon_env: Mapping[str, str]) -> str | None:
    """The PATH a command job runs with, as `command_ranks` builds its environment: its own
    `env`'s, else the daemon's."""
    return dict(settings.env).get("PATH", daemon_env.get("PATH"))


def unstartable(settings: JobSettings, daemon_env: Mapping[str, str]) -> str | None:
    """Why a command job's program could not be started, or None. Checked at submit, so
    that a job that could never start is refused then rather than failing at its turn, and
    only where the answer tells the tenant nothing of the node: a bare name on the daemon's
    own PATH. A path with a folder, or a PATH the job's env sets, could probe for files
    outside the tenant's roots, and a PATH with relative entries resolves against the
    workdir at launch: those are left to the launch. (The daemon looks as its own user; a
    job run as a tenant's user may still be refused a program the daemon may run.)"""
    if settings.command is None or "PATH" in dict(settings.env):
        return None
    program = settings.command[0]
    search_path = daemon_env.get("PATH", "")
    entries = search_path.split(os.pathsep)
    if os.sep in program or not all(os.path.isabs(entry) for entry in entries):
        return None
    if shutil.which(program, path=search_path) is not None:
        return None
    interpreter = _INTERPRETERS.get(os.path.splitext(program)[1])
    if interpreter == "python" and shutil.which("python", path=search_path) is None:
        interpreter = "python3"  # Debian's, without the python-is-python3 package
    if interpreter is not None:  # `stoker submit train.py`: a script, not a program
        line = shlex.join([interpreter, *settings.command])
        return (
            f"{program!r} is a script, not a program on the PATH: run it with its"
            f" interpreter, `stoker submit -- {line}`"
        )
    return (
        f"{program!r} is not on the PATH jobs run with, the daemon's ({search_path}); "
        f"{PATH_FIX} (e.g. after `source .venv/bin/activate`)"
    )


_INTERPRETERS = {".py": "python", ".sh": "bash"}  # a script named as the command: its runner
_RANK_LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch")  # `python -m` them


def own_ranks(settings: JobSettings) -> str | None:
    """Why a command that starts ranks of its own (torchrun) is refused, or None: stoker
    starts a rank per GPU itself, and torchrun's under it would run several on one."""
    command = settings.command
    if command is None or not _launches_ranks(command):
        return None
    at = next((i for i, arg in enumerate(command) if arg.endswith(".py")), None)
    script = shlex.join(["python", *command[at:]]) if at is not None else "python train.py"
    return (
        f"{command[0]} starts ranks of its own, and stoker starts one per GPU itself, with"
        " torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, ...): submit the script"
        f" alone, `stoker submit --gpus N -- {script}`"
    )


def _launches_ranks(command: Sequence[str]) -> bool:
    """Whether a command starts ranks of its own: `torchrun ...`, `python -m
    torch.distributed.run ...` (or its older `launch`)."""
    if os.path.basename(command[0]) == "torchrun":
        return True
    module = command[2] if len(command) > 2 and command[1] == "-m" else None
    return os.path.basename(command[0]).startswith("python") and module in _RANK_LAUNCHERS


def agent_argv(config: DaemonConfig, launch: AgentLaunch, endpoint: str, decoder: str) -> list[str]:
    """A zoo job's simulated agent (`simulate` mode): the protocol, no training."""
    settings = launch.settings
    assert settings.model is not None and settings.iterations is not None  # a zoo job
    assert launch.predicted is not None
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
    simulated = config.simulated
    scale = simulated.time_scale
    return [
        sys.executable, "-m", "agents.simulated", *common,
        "--step-time-s", str(launch.predicted.step_time_s * scale),
        "--sample-cost-s", str(launch.predicted.sample_cost_s * scale),
        "--pause-s", str(simulated.pause_s * scale),
        "--resume-s", str(simulated.resume_s * scale),
    ]  # fmt: skip
