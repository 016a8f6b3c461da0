"""The jobs this daemon runs or ran, as submitted (`records`), and what follows from a job's
record and the daemon's config alone: what the core plans for it, whether it is simulated,
the dataset, the unix user and the command it runs as. Every part of the daemon reads jobs
through one `JobBook`, so a record is converted to the core's `JobRequest` in one place."""

import os
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from daemon.agentargs import job_path
from daemon.config import DaemonConfig
from daemon.items import SubmitError
from daemon.jobspec import JobSettings
from daemon.store import JobRecord, Store
from daemon.tenants import UnixUser
from daemon.zoodata import zoo_image_size
from scheduler.messages import JobRequest


class JobBook:
    def __init__(self, config: DaemonConfig, store: Store, users: Mapping[str, UnixUser]) -> None:
        self._config = config
        self._store = store
        self._users = users
        self.records: dict[str, JobRecord] = {}  # every job this daemon runs or ran

    def request(self, record: JobRecord) -> JobRequest:
        """The one conversion of a stored job to what the core plans."""
        stored = self._store.job(record.id)
        settings = record.settings
        dataset = settings.dataset or self._config.training.default_dataset
        request = settings.request(
            record.id,
            default_max_restarts=self._config.max_restarts,
            restarts=stored.restarts if stored is not None else 0,
            image_size=zoo_image_size(self._config.training.image_size, dataset),
        )
        # A simulated agent's pauses are the simulated testbed's, not an in-place resize's.
        hot = settings.resize == "hot" and not self.simulated(settings)
        # An earlier daemon's start counts against its time limit (a restored job).
        first = stored.started_at if stored is not None else None
        ran_before = max(0.0, time.time() - first) if first is not None else 0.0
        # A restored job goes on from its newest checkpoint: the core's launches name it.
        checkpoint = stored.checkpoint if stored is not None else ""
        return replace(
            request,
            tenant=record.tenant,
            hot_resize=hot,
            ran_before_s=ran_before,
            checkpoint=checkpoint,
        )

    def simulated(self, settings: JobSettings) -> bool:
        """Whether the job runs as a simulated agent (a zoo job under `agent_mode =
        "simulate"`), not as a real process that trains."""
        return self._config.agent_mode == "simulate" and not settings.is_command

    def dataset(self, settings: JobSettings) -> Path:
        given = settings.dataset or self._config.training.default_dataset
        if given is None:
            raise SubmitError(
                "dataset",
                "give a folder made by `stoker dataset make DIR`, or set "
                "training.default_dataset in the daemon's config",
            )
        return Path(given)

    def job_user(self, job_id: str) -> UnixUser | None:
        """The unix user a job runs as; None: the daemon's own."""
        record = self.records.get(job_id)
        return self._users.get(record.tenant) if record is not None else None

    def job_user_name(self, job_id: str) -> str | None:
        user = self.job_user(job_id)
        return user.name if user is not None else None

    def command_run(self, job_id: str) -> tuple[Sequence[str], str | None] | None:
        """A command job's argv and the PATH it runs with; None for a zoo job (the daemon's
        own python runs it)."""
        record = self.records.get(job_id)
        if record is None or record.settings.command is None:
            return None
        return record.settings.command, job_path(record.settings, os.environ)

    def workdir(self, job_id: str, job_dir: Path) -> str:
        """The folder a command job runs in: its `workdir`, else its job folder (`job_dir`,
        as `command_ranks` sets it)."""
        record = self.records.get(job_id)
        given = record.settings.workdir if record is not None else None
        return given or str(job_dir)

    def cold(self, job_id: str) -> bool:
        """Whether the job resizes cold: its processes exit after each pause (a simulated
        agent resizes hot)."""
        record = self.records.get(job_id)
        if record is None or record.settings.resize != "cold":
            return False
        return not self.simulated(record.settings)

    def env_given(self, job_id: str) -> set[str]:
        """The names of the variables the job's submit gave it."""
        record = self.records.get(job_id)
        return {name for name, _ in record.settings.env} if record is not None else set()


def new_job_id(name: str) -> str:
    """`name`, cut to 40 characters, and 48 random bits: two jobs of one name collide once
    in about 16 million (24 bits collided within 8,000 submissions, issue 17); a collision
    is caught at the write and the submit draws again."""
    return f"{name[:40]}-{secrets.token_hex(6)}"
