"""The daemon's service driven in-process: a hand-held clock, a real SQLite state dir, and a
launcher whose processes are records (no agent runs; exits are scripted). Everything runs
inside one asyncio loop, as in the daemon, because commands to agents are sent from it."""

import asyncio
import contextlib
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from agents.protocol import AgentMessage
from allocator import ThroughputModel
from daemon.api import load_model
from daemon.config import DaemonConfig, NodeConfig
from daemon.items import CancelCall, Fitted, FromAgent, SubmitCall
from daemon.launcher import Exit, Launcher, RankProcess
from daemon.service import Service
from daemon.store import JobRecord
from scheduler.config import SchedulerConfig
from scheduler.messages import Command, Event
from tpm import FitResult, FittedTPM


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class RecordedLauncher(Launcher):
    """A launcher whose agents are records: what was started, with which argv and env,
    and the exits a test scripts with `exit`."""

    def __init__(self, jobs_dir: Path) -> None:
        super().__init__(jobs_dir)
        self.launches: list[tuple[str, list[str], dict[str, str]]] = []
        self.live: dict[str, int] = {}
        self._exits: list[tuple[str, int | None]] = []
        # job -> the errors its next launches raise, one a launch, before it starts as usual
        # (an EMFILE: the node short for it; a FileNotFoundError: its program missing).
        self.failures: dict[str, list[OSError]] = {}

    def launch(self, job_id: str, argv: Sequence[str], env: Mapping[str, str]) -> int:
        if self.failures.get(job_id):
            raise self.failures[job_id].pop(0)
        self.launches.append((job_id, list(argv), dict(env)))
        pid = 40_000 + len(self.launches)
        self.live[job_id] = pid
        return pid

    def launch_ranks(self, job_id: str, ranks: Sequence[RankProcess]) -> int:
        """A command job's ranks: recorded as rank 0's launch, never started."""
        return self.launch(job_id, list(ranks[0].argv), dict(ranks[0].env))

    def launched(self) -> list[str]:
        """The ids of the jobs launched, in launch order (a relaunch again)."""
        return [job_id for job_id, _, _ in self.launches]

    def exit(self, job_id: str, code: int | None) -> None:
        self._exits.append((job_id, code))

    def exited(self) -> list[Exit]:
        done, self._exits = self._exits, []
        for job_id, _ in done:
            self.live.pop(job_id, None)
        return [Exit(job_id, code, ((0, code),) if code else ()) for job_id, code in done]

    def adopt(self, job_id: str, pid: int) -> None:
        self.live[job_id] = pid

    def running(self, job_id: str) -> bool:
        return job_id in self.live

    def stop(self, job_id: str, grace_s: float = 5.0) -> None:
        self.live.pop(job_id, None)

    def stop_pid(self, pid: int) -> None:
        """Stop the processes of the job whose agent has `pid` (a restore's stop)."""
        self.live = {job_id: alive for job_id, alive in self.live.items() if alive != pid}

    def stop_all(self, grace_s: float = 5.0, keep: Collection[str] = ()) -> None:
        self.live = {job_id: pid for job_id, pid in self.live.items() if job_id in keep}


@dataclass
class Fed:
    """One event the core got from the service, when, and what it answered."""

    event: Event
    now: float
    commands: list[Command] = field(default_factory=list)


class Driver:
    """Feeds the service as the daemon's loop does, one item and one tick per `step`."""

    def __init__(
        self,
        tmp_path: Path,
        scheduler: SchedulerConfig,
        *,
        model: ThroughputModel | None = None,
        **settings: Any,
    ) -> None:
        settings.setdefault("node", NodeConfig(gpus=2, cpu_workers=18, max_jobs_per_gpu=1))
        settings.setdefault("shutdown_grace_s", 0.0)  # the clock stands still: no waiting
        # The tenants `submit` takes: a restart refuses unfinished jobs of one not named.
        settings.setdefault("tokens", {name: name * 8 for name in ("admin", "alice", "bob")})
        self.config = DaemonConfig(
            state_dir=tmp_path / "state", agent_mode="simulate", scheduler=scheduler, **settings
        )
        self.clock = Clock()
        self.launcher = RecordedLauncher(self.config.state_dir / "jobs")
        self.model = model or load_model(self.config)
        self.fed: list[Fed] = []
        self.restarted_at: list[int] = []  # where in `fed` each restarted service begins
        self._patches = contextlib.ExitStack()
        self._stopped = False  # a clean stop ran: the next restart has nothing to kill
        self.service = self._start()

    def _start(self) -> Service:
        service = Service(self.config, self.model, clock=self.clock, launcher=self.launcher)
        service.observer = lambda event, now, out: self.fed.append(Fed(event, now, list(out)))
        return service

    def at(self, seconds: float) -> "Driver":
        """Set the clock to `seconds` after the service started."""
        self.clock.now = 1000.0 + seconds
        return self

    def submit(self, job_id: str, tenant: str = "alice", **spec: Any) -> None:
        body = {"model": "Resnet18", "batch_size": 64, "gpus": 1, "iterations": 500, **spec}
        record = JobRecord(
            id=job_id,
            tenant=tenant,
            name=job_id,
            spec=body,
            state="submitted",
            submitted_at=time.time(),
            updated_at=time.time(),
            restarts=0,
            checkpoint="",
            pid=None,
        )
        self.service.step(SubmitCall(record, asyncio.get_running_loop().create_future()))

    def cancel(self, job_id: str, by: str = "alice") -> None:
        self.service.step(CancelCall(job_id, by, asyncio.get_running_loop().create_future()))

    def agent(self, message: AgentMessage) -> None:
        """A message from the job's agent, carrying its launch's secret as the SDK does."""
        secret = self.service.agent_secrets.get(message.job, "")
        if secret and not message.secret:
            message = message.model_copy(update={"secret": secret})
        self.service.step(FromAgent(message))

    def tick(self) -> None:
        self.service.step(None)

    def state(self, job_id: str) -> str:
        record = self.service.store.job(job_id)
        assert record is not None, job_id
        return record.state

    def events(self, job_id: str, kind: str) -> list[dict[str, Any]]:
        return [event.data for event in self.service.store.events(job_id) if event.kind == kind]

    def killed(self) -> None:
        """Leave the state dir as a kill -9 does: no clean stop recorded, nothing stopped."""
        self.service.store.close()
        self.service.link.close()
        self.service._lock.release()

    async def stop(self) -> None:
        """A clean stop (SIGTERM): the service's way out; `restart` then starts another."""
        await self.service.shutdown()
        self._stopped = True

    def restart(self) -> None:
        """A kill -9 of the daemon (or, after `stop`, nothing more) and a start of another on
        the same state dir, which restores its jobs. The agents outlive it: the launcher's
        records are the process table its restore reads (and stops processes in). Its clock
        counts from the first one's start, so that its core sees the times one simulated
        clock gives (a real restart's counts from its own: the core only compares its times
        with each other)."""
        if not self._stopped:
            self.killed()
        self._stopped = False
        launcher = self.launcher
        self._patches.enter_context(
            mock.patch(
                "daemon.restore.is_agent",
                lambda pid, job_id, folder: launcher.live.get(job_id) == pid,
            )
        )
        self._patches.enter_context(
            mock.patch(
                "daemon.restore.stop_group",
                lambda pid, grace_s, children=(): launcher.stop_pid(pid),
            )
        )
        now, self.clock.now = self.clock.now, 1000.0
        self.service = self._start()
        self.clock.now = now
        self.restarted_at.append(len(self.fed))
        self.service.restorer.restore()

    def refit(self, report: dict[str, object]) -> None:
        """A refit whose fit is the model the service plans with, judged by `report`."""
        assert isinstance(self.model, FittedTPM), "a refit stores a fitted model"
        done = asyncio.get_running_loop().create_future()
        self.service.step(Fitted(FitResult(self.model, report), done))

    async def close(self) -> None:
        try:
            await asyncio.sleep(0)  # let the sends the commands queued run
            await self.service.shutdown()
        finally:
            self._patches.close()
