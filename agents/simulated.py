"""`stoker agent --simulate`: an application master that trains nothing but speaks the real
protocol over real ZeroMQ, so the daemon, its tests and its demo run on any machine.

It says it is simulated in its log and in every checkpoint it writes. An iteration takes
the longer of the GPU step (`step_time_s`) and the time its loader workers need for one
mini-batch per GPU (`batch_size / gpus x sample_cost_s / workers`), the waiting counted as
idle: formula 5's min(mu, lambda) without contention. Pause, checkpoint (atomic:
temp file, fsync, rename) and resume behave as DESIGN.md's hot resize; a job started with
`--resume-from` continues from the checkpoint's iteration.
"""

import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from agents.agentmessages import (
    AgentState,
    FinishedMessage,
    HeartbeatMessage,
    Hello,
    PausedMessage,
    ResumedMessage,
)
from agents.daemonmessages import CancelMessage, PauseMessage, ResumeMessage
from agents.link import AgentJob, DaemonLink, agent_arguments
from agents.protocol import write_finished_marker

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class SimulatedJob(AgentJob):
    step_time_s: float = 0.05
    sample_cost_s: float = 0.0
    pause_s: float = 0.05
    resume_s: float = 0.05


class _Cancelled(Exception):
    pass


class SimulatedAgent:
    def __init__(self, job: SimulatedJob) -> None:
        self.job = job
        self.iteration = 0
        self.workers = job.workers_per_gpu
        self.share = job.decoder_share
        self.gen = job.gen
        if job.resume_from is not None:
            self.iteration = int(json.loads(job.resume_from.read_text())["iteration"])
        self._link = DaemonLink(job.job_id, job.endpoint, job.heartbeat_s, phase="training")

    def run(self) -> int:
        """Train to the end or until cancelled; the process exit code."""
        log.info("job %s: simulated agent (no real training), pid %d", self.job.job_id, os.getpid())
        self._hello("starting")
        try:
            self._train()
        except _Cancelled:
            log.info("job %s: cancelled at iteration %d", self.job.job_id, self.iteration)
            return 0
        finally:
            self._link.close()
        return 0

    def _train(self) -> None:
        window_start, window_samples = time.monotonic(), 0
        idle_s = step_s = 0.0
        while self.iteration < self.job.iterations:
            self._poll()
            per_gpu = self.job.batch_size / self.job.gpus
            step = max(self.job.step_time_s, per_gpu * self.job.sample_cost_s / self.workers)
            time.sleep(step)
            step_s += self.job.step_time_s
            idle_s += step - self.job.step_time_s
            self.iteration += 1
            window_samples += self.job.batch_size
            elapsed = time.monotonic() - window_start
            if elapsed >= self.job.heartbeat_s:
                self._link.send(
                    HeartbeatMessage(
                        job=self.job.job_id,
                        gen=self.gen,
                        iteration=self.iteration,
                        samples=self.iteration * self.job.batch_size,
                        idle_s=idle_s,
                        step_s=step_s,
                        samples_per_s=window_samples / elapsed,
                        workers=self.workers,
                        share=self.share,
                    )
                )
                window_start, window_samples, idle_s, step_s = time.monotonic(), 0, 0.0, 0.0
        write_finished_marker(self.job.checkpoint_dir, self.iteration)
        self._link.send(
            FinishedMessage(job=self.job.job_id, gen=self.gen, iteration=self.iteration)
        )

    def _hello(self, state: AgentState) -> None:
        self._link.send(
            Hello(
                job=self.job.job_id,
                gen=self.gen,
                pid=os.getpid(),
                state=state,
                iteration=self.iteration,
                workers=self.workers,
                share=self.share,
            )
        )

    def _reconnected(self, state: AgentState) -> None:
        """Say hello again after every reconnection (a new daemon)."""
        if self._link.reconnected():
            log.info("job %s: reconnected, saying hello", self.job.job_id)
            self._hello(state)

    def _poll(self) -> None:
        """Apply a pause or cancel that is waiting."""
        self._reconnected("running")
        stop = self._link.next_stop()
        share = self._link.take_share()
        if share is not None and share != self.share:
            log.info("job %s: decoder share %.3f, live", self.job.job_id, share)
            self.share = share
        match stop:
            case PauseMessage(gen=gen):
                self._pause(gen)
            case CancelMessage():
                raise _Cancelled

    def _pause(self, gen: int) -> None:
        paused_at = time.monotonic()
        time.sleep(self.job.pause_s)
        checkpoint = self._checkpoint()
        self._link.send(
            PausedMessage(
                job=self.job.job_id, gen=gen, iteration=self.iteration, checkpoint=str(checkpoint)
            )
        )
        while True:  # paused: only resume or cancel moves us on
            self._reconnected("paused")
            message = self._link.receive(self.job.heartbeat_s)
            if isinstance(message, CancelMessage):
                raise _Cancelled
            if isinstance(message, ResumeMessage):
                time.sleep(self.job.resume_s)
                self.gen, self.workers = message.gen, message.workers_per_gpu
                self.share = message.decoder_share
                self._link.send(
                    ResumedMessage(
                        job=self.job.job_id,
                        gen=self.gen,
                        workers=self.workers,
                        share=self.share,
                        gap_s=time.monotonic() - paused_at,
                    )
                )
                return

    def _checkpoint(self) -> Path:
        self.job.checkpoint_dir.mkdir(exist_ok=True)  # in the job's folder: never made again
        final = self.job.checkpoint_dir / "checkpoint.json"
        temporary = final.with_suffix(".tmp")
        state = {"simulated": True, "job": self.job.job_id, "iteration": self.iteration}
        with temporary.open("w") as handle:
            json.dump(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        temporary.replace(final)
        return final


def main(argv: list[str] | None = None) -> int:
    """`python -m agents.simulated ...`, which the daemon's launcher runs per job."""
    parser = agent_arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--step-time-s", type=float, required=True)
    parser.add_argument("--sample-cost-s", type=float, required=True)
    parser.add_argument("--pause-s", type=float, default=0.05)
    parser.add_argument("--resume-s", type=float, default=0.05)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    job = SimulatedJob(
        **AgentJob.options(args),
        step_time_s=args.step_time_s,
        sample_cost_s=args.sample_cost_s,
        pause_s=args.pause_s,
        resume_s=args.resume_s,
    )
    return SimulatedAgent(job).run()


if __name__ == "__main__":
    sys.exit(main())
