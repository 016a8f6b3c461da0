"""What readers see of the node and its jobs, built from the core's status and what the
daemon measured (`LiveJob`, `NodeSnapshot`): the REST API, the dashboard and the metrics read
these, never the service's insides."""

from dataclasses import replace
from pathlib import Path

from daemon.parts import Parts
from daemon.snapshot import LiveJob, NodeSnapshot
from daemon.store import JobRecord
from scheduler.errors import UnknownJob
from scheduler.scheduler import JobStatus
from scheduler.states import JobState


class Views:
    def __init__(self, parts: Parts, warnings: tuple[str, ...]) -> None:
        self._parts = parts
        self._warnings = warnings

    def live_job(self, job_id: str) -> LiveJob | None:
        """One job as the core sees it now; None for a job it does not plan (yet)."""
        try:
            return self._live(self._parts.scheduler.status(job_id))
        except UnknownJob:
            return None

    def gpus_held(self, record: JobRecord, live: LiveJob | None) -> list[int]:
        """The GPUs the job holds: while it runs, and after its end while its processes do
        (a completed job adopted after a restart is unknown to the core: its stored placement)."""
        if live is not None and live.holds_gpus:
            return list(live.gpu_indices)
        return list(record.placement) if record.id in self._parts.scheduler.exiting else []

    @staticmethod
    def length(record: JobRecord, live: LiveJob | None) -> int | None:
        """Where the job ends: as the core says now, else as it last said (stored: a job
        that ended before the daemon restarted), else its job file's; None: unsaid."""
        if live is not None and live.total_iterations is not None:
            return live.total_iterations
        if record.total_iterations is not None:
            return record.total_iterations
        return record.settings.iterations

    @staticmethod
    def script_batch(record: JobRecord, live: LiveJob | None) -> int | None:
        """The samples a step of the job's script takes: as the core has it now, else as
        it last had it (stored); None: its script has not said."""
        if live is not None and live.script_batch_size is not None:
            return live.script_batch_size
        return record.script_batch_size

    def _live(self, status: JobStatus) -> LiveJob:
        held = self._parts.held
        record = self._parts.jobs.records.get(status.id)
        total = status.total_iterations
        running = status.state is JobState.RUNNING
        return LiveJob(
            id=status.id,
            tenant=record.tenant if record is not None else "",
            state=status.state,
            allocation=status.allocation,
            iteration=status.iteration,
            predicted_samples_per_s=status.predicted_samples_per_s,
            measured_samples_per_s=status.measured_samples_per_s,
            restarts=status.restarts,
            gpu_indices=status.gpu_indices,
            heartbeat=held.measured.get(status.id),
            reported=held.reported.get(status.id, {}),
            curve=status.curve,
            pause_cost_s=status.pause_cost_s,
            unmanaged=status.unmanaged,
            exiting=status.exiting,
            total_iterations=total,
            script_batch_size=status.script_batch_size,
            phase=status.phase,
            stalled=status.stalled,
            planned=status.planned,
            seconds_left=held.pace.seconds_left(status.id, total) if total and running else None,
        )

    def snapshot(self) -> NodeSnapshot:
        """The node now, for readers (every job the core knows: O(jobs))."""
        parts = self._parts
        scheduler, tpm = parts.scheduler, parts.tpm
        jobs = {job_id: self._live(status) for job_id, status in scheduler.jobs().items()}
        return NodeSnapshot(
            generation=scheduler.generation,
            jobs=jobs,
            waiting_for_gpus=scheduler.waiting_for_gpus,
            loader_processes=scheduler.loader_processes(),
            cpu_workers=parts.node.cpu_workers,
            decoder_capacity=parts.config.node.decoder_capacity,
            slots=parts.node.slots,
            uses_gpus=parts.uses_gpus,
            policy=parts.config.scheduler.policy,
            agent_mode=parts.config.agent_mode,
            model_source=tpm.source,
            model_report=dict(tpm.report),
            model_refused=dict(tpm.refused) if tpm.refused else None,
            counts=replace(
                parts.counters,
                telemetry_samples=tpm.telemetry_samples,
                agent_messages_refused=parts.link.malformed,
            ),
            warnings=self._warnings,
            contention=scheduler.node.contention.points,
            contention_learned=scheduler.contention_learned,
            exiting_gpus=scheduler.exiting_gpus(),
        )

    def writing_job_dirs(self) -> list[Path]:
        """The folders of jobs whose processes may still write: unfinished jobs, and ended
        ones whose processes run on (a script's work after its final step)."""
        scheduler = self._parts.scheduler
        exiting = scheduler.exiting
        return [
            self._parts.launcher.jobs_dir / job_id
            for job_id, status in scheduler.jobs().items()
            if not status.state.final or job_id in exiting
        ]
