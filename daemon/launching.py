"""Starting a job's processes as the core's `Launch` (or a cold resize's `Resume`) says:
its argv and environment (`daemon/agentargs.py`), its secret, its CPUs under
`node.cpu_sets`; a launch that raised is told to the core (`LaunchFailed`): the node short
for it (`daemons_own`), or refused, worded for whoever must fix it. Also the checkpoint
check every start and pause goes through."""

import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from agents.protocol import LAST_STEP_MARKER, SECRET_VARIABLE
from daemon import continuing
from daemon.agentargs import AgentLaunch, agent_argv, agent_env, command_ranks
from daemon.exitreason import launch_failure, zoo_launch_failure
from daemon.launcher import Launcher
from daemon.parts import Parts
from daemon.spawn import daemons_own
from scheduler.errors import UnknownJob
from scheduler.messages import Allocation, Launch, LaunchFailed, LaunchFailure

log = logging.getLogger(__name__)


def own_checkpoint(launcher: Launcher, job_id: str, path: str) -> str:
    """`path` if it lies in the job's own folder (links resolved), else "" and a warning:
    the daemon never keeps, nor starts a job from, a file that another process chose for it
    (issue 17, finding 4: a forged `paused` named /tmp/evil.pt)."""
    if not path:
        return ""
    own = launcher.job_dir(job_id).resolve()
    if Path(path).resolve().is_relative_to(own):
        return path
    log.warning("job %s: checkpoint %r is outside %s: ignored", job_id, path[:200], own)
    return ""


class Starter:
    def __init__(self, parts: Parts) -> None:
        self._parts = parts

    def launch_failed(self, launch: Launch, error: Exception) -> None:
        """A launch that raised, told to the core with the daemon's account of it
        (`LaunchFailed`). The node's lack (`daemons_own`) is said as the error says it; a
        command whose program could not be executed is the user's to fix, said in its
        reason; anything else is the daemon's, logged with its traceback."""
        parts, job_id = self._parts, launch.job_id
        if daemons_own(error):
            kind, why = LaunchFailure.SHORT, str(error)
        else:
            kind, why = LaunchFailure.REFUSED, self._refused_words(job_id, error)
        # Anything of it the launch left running is the core's to stop (`StopProcesses`).
        exited = not parts.launcher.running(job_id)
        parts.feed(LaunchFailed(job_id, launch, kind, why, exited=exited))

    def _refused_words(self, job_id: str, error: Exception) -> str:
        """Why a launch was refused, for whoever must fix it; logged."""
        parts = self._parts
        run = parts.jobs.command_run(job_id)
        if isinstance(error, OSError) and run is not None:
            user = parts.jobs.job_user(job_id)
            workdir = parts.jobs.workdir(job_id, parts.launcher.job_dir(job_id))
            why = launch_failure(error, *run, workdir, user)
            log.warning("job %s: %s", job_id, why)
        elif isinstance(error, OSError) and (said := zoo_launch_failure(error, sys.executable)):
            why = said  # the operator's to fix: where stoker is installed
            log.warning("job %s: %s", job_id, why)
        else:
            log.exception("job %s: launch failed", job_id)
            why = f"launch failed: {error}"
        return why

    def resume_cold(self, job_id: str, gen: int, allocation: Allocation, paused_at: float) -> None:
        """A cold-resize job's agent exited after `paused` (at `paused_at`, epoch s):
        start a new one from the checkpoint with the new allocation; it says `resumed`
        after its first step."""
        stored = self._parts.store.job(job_id)
        checkpoint = stored.checkpoint if stored is not None else ""
        self.start(job_id, gen, allocation, checkpoint, paused_at=paused_at)

    def start(
        self,
        job_id: str,
        gen: int,
        allocation: Allocation,
        resume_from: str,
        paused_at: float | None = None,
    ) -> None:
        parts = self._parts
        launcher = parts.launcher
        parts.counters.launches += 1
        if launcher.running(job_id):
            launcher.stop(job_id, grace_s=2.0)
        # An earlier attempt's last word is not this one's.
        (launcher.job_dir(job_id) / LAST_STEP_MARKER).unlink(missing_ok=True)
        launch = self._launch(job_id, gen, allocation, resume_from, paused_at)
        if launch.cpus:
            parts.held.pinned[job_id] = launch.cpus
        endpoint = parts.link.endpoint_for(parts.jobs.job_user_name(job_id))
        if parts.jobs.simulated(launch.settings):
            # its tenant's socket, as a process agent's (issue 37, finding 13)
            argv = agent_argv(parts.config, launch, endpoint, parts.decoder_endpoint)
            indices = ",".join(str(index) for index in launch.gpu_indices)
            slot = "CUDA_VISIBLE_DEVICES" if parts.uses_gpus else "STOKER_CPU_SLOTS"
            own = {slot: indices, "STOKER_JOB_ID": job_id, "STOKER_JOB_DIR": str(launch.job_dir)}
            own[SECRET_VARIABLE] = launch.secret
            pid = launcher.launch(job_id, argv, agent_env(os.environ, own))
        else:  # a command, or a zoo job's command: the built-in trainer on the SDK
            decoder = parts.decoder_endpoint
            ranks = command_ranks(parts.config, launch, endpoint, os.environ, decoder)
            pid = launcher.launch_ranks(job_id, ranks)
        parts.store.update_job(job_id, time.time(), pid=pid)

    def _launch(
        self,
        job_id: str,
        gen: int,
        allocation: Allocation,
        resume_from: str,
        paused_at: float | None,
    ) -> AgentLaunch:
        """What the launch of the job's processes is given."""
        parts = self._parts
        record = parts.jobs.records[job_id]
        settings = record.settings
        simulated = parts.jobs.simulated(settings)
        stored = parts.store.job(job_id)
        placed = parts.scheduler.status(job_id).gpu_indices
        return AgentLaunch(
            job_id=job_id,
            settings=settings,
            gen=gen,
            allocation=allocation,
            # a state dir's older rows too
            resume_from=own_checkpoint(parts.launcher, job_id, resume_from),
            secret=parts.keys.new_secret(job_id),
            job_dir=parts.launcher.job_dir(job_id),
            dataset=None if simulated or settings.is_command else parts.jobs.dataset(settings),
            predicted=parts.tpm.rates.job_spec(parts.jobs.request(record)) if simulated else None,
            paused_at=paused_at,
            attempt=stored.restarts if stored is not None else 0,
            gpu_indices=placed,
            uses_gpus=parts.uses_gpus,
            threads=parts.node.threads_per_slot,
            user=parts.jobs.job_user(job_id),
            cpus=parts.node.job_cpus(placed, _occupied(self._placed())),
            lineage_root=continuing.lineage(parts.store, job_id)[0].id
            if settings.continue_from
            else "",
        )

    def pin_cpus(self) -> None:
        """With `node.cpu_sets`, keep each running job on its share of the CPUs as jobs
        come and go (`NodeResources.job_cpus`): moved only when its share changes."""
        parts, pinned = self._parts, self._parts.held.pinned
        if not parts.node.cpu_sets:
            return
        placed = self._placed()
        occupied = _occupied(placed)
        for job_id in set(pinned) - set(placed):
            del pinned[job_id]
        for job_id, slots in placed.items():
            cpus = parts.node.job_cpus(slots, occupied)
            if pinned.get(job_id) != cpus:
                parts.launcher.pin(job_id, cpus)
                pinned[job_id] = cpus

    def _placed(self) -> dict[str, tuple[int, ...]]:
        """The slots of each job whose processes run."""
        return {job_id: self._slots(job_id) for job_id in self._parts.launcher.job_ids()}

    def _slots(self, job_id: str) -> tuple[int, ...]:
        """The job's GPUs (or CPU slots); none for a process the core does not know."""
        try:
            return self._parts.scheduler.status(job_id).gpu_indices
        except UnknownJob:
            return ()


def _occupied(placed: Mapping[str, Sequence[int]]) -> list[int]:
    """The slots that hold a running job."""
    return sorted({slot for slots in placed.values() for slot in slots})
