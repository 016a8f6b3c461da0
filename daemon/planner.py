"""Where the daemon has the core's plans made (scheduler/planning.py, issue 39 item 3).

A policy may work for a while on a node of many jobs; made on the event loop, that plan
held every REST call, heartbeat and dashboard read behind it. Made elsewhere, it comes back
as an item on the service's queue (`PlanDone`), to be fed to the core as `PlanMade`; the
core keeps one plan in flight and checks that what it planned is still there when the plan
comes, so nothing the loop took meanwhile is lost.

Where: a plan of `PROCESS_FROM_JOBS` jobs or more in a process of its own, started at the
first such plan; a smaller one in a worker thread. A thread shares the interpreter's lock
with the loop: measured on the 2-core machine with `lookahead` planning 128 jobs in a
thread, REST reads waited 20 to 40 ms at p99 for it, and several hundred ms while the
policy ran long NumPy calls that hold the lock. A process shares nothing, but costs about
0.2 s of CPU to start (an interpreter with NumPy), which a plan of a few jobs (a few
milliseconds) does not repay. tests/integration/test_planning_off_loop.py is the check.

Every plan asked for is answered: one that cannot start in the process is made in the
thread, and anything else comes back as an error. A plan the core gives up
(`PlanAbandoned`, past `scheduler.plan_timeout_s`) has its process killed, so that the next
starts in a new one; so does a daemon that stops."""

import asyncio
import logging
import multiprocessing
import os
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import BrokenExecutor, Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass

from daemon.items import Item, PlanDone
from daemon.metrics import Metrics
from scheduler.messages import PlanAbandoned, PlanMade, PlanNeeded, PlanOutcome
from scheduler.planning import work_out

log = logging.getLogger(__name__)

PROCESS_FROM_JOBS = 16
# The planning process yields the CPU to the daemon (and to the jobs): a plan is background
# work, a REST answer or a heartbeat read is not. On a busy host, nice 10 gives the loop
# about nine times the planner's share of a core where both want one.
PLAN_NICE = 10


@dataclass(frozen=True)
class PlanTiming:
    """When a plan was asked for and made (`time.monotonic()`), and the jobs it planned."""

    asked: float
    made: float
    jobs: int


class Planner:
    """Makes each plan the core asks for: off the event loop, its answer put on the
    service's queue (`off_loop`, the daemon's); else at once, its answer fed straight back
    (a hand-held service, as the simulator does)."""

    def __init__(
        self,
        put: Callable[[Item], None],
        feed: Callable[[PlanMade], object],
        metrics: Metrics,
        *,
        off_loop: bool,
    ) -> None:
        self._put, self._feed, self._metrics = put, feed, metrics
        self.timings: deque[PlanTiming] = deque(maxlen=64)  # the newest plans'
        self._off_loop = off_loop
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stoker-plan")
        self._process: ProcessPoolExecutor | None = None  # started at the first big plan

    def make(self, needed: PlanNeeded) -> None:
        asked = time.monotonic()
        if not self._off_loop:
            outcome = work_out(needed.work)
            self._timed(needed, asked)
            self._feed(PlanMade(needed.ticket, outcome))
            return
        try:
            self._run(needed, asked, self._pool_for(needed))
        except Exception as error:  # the core waits for an answer: never leave it without one
            log.exception("planning could not start")
            failed = PlanOutcome(None, error=RuntimeError(f"planning could not start: {error}"))
            self._put(PlanDone(needed.ticket, failed))

    def abandon(self, given_up: PlanAbandoned) -> None:
        """The core gave a plan up (`scheduler.plan_timeout_s`): stop the process that was
        making it, so that the plan asked for next starts in a new one. (A plan in the
        thread cannot be stopped; a plan of fewer jobs than `PROCESS_FROM_JOBS` takes
        milliseconds.)"""
        log.warning(
            "a plan of %d jobs was not made in %.0f s: given up, and asked for again",
            given_up.jobs,
            given_up.waited_s,
        )
        self._stop_process()

    def _pool_for(self, needed: PlanNeeded) -> Executor:
        if len(needed.work.request.jobs) < PROCESS_FROM_JOBS:
            return self._thread
        if self._process is None:
            # Spawned, not forked: the daemon has threads (ZeroMQ's, asyncio's) whose locks
            # a forked child could inherit held.
            spawn = multiprocessing.get_context("spawn")
            self._process = ProcessPoolExecutor(
                max_workers=1, mp_context=spawn, initializer=os.nice, initargs=(PLAN_NICE,)
            )
        return self._process

    def _run(self, needed: PlanNeeded, asked: float, pool: Executor) -> None:
        loop = asyncio.get_running_loop()
        try:
            done = loop.run_in_executor(pool, work_out, needed.work)
        except (BrokenExecutor, OSError) as error:  # its process died idle, or cannot start
            self._lost_process(error)
            pool = self._thread
            done = loop.run_in_executor(pool, work_out, needed.work)
        done.add_done_callback(lambda made: self._hand_back(needed, asked, pool, made))

    def _hand_back(
        self,
        needed: PlanNeeded,
        asked: float,
        pool: Executor,
        made: "asyncio.Future[PlanOutcome]",
    ) -> None:
        if made.cancelled() or pool not in (self._thread, self._process):
            return  # the daemon is stopping, or the plan was given up and its process stopped
        failure = made.exception()
        if failure is not None and pool is self._process:
            # It died while planning (killed, out of memory): the core still waits for this
            # plan, so it is made again in the thread.
            self._lost_process(failure)
            self._run(needed, asked, self._thread)
            return
        if failure is not None:  # `work_out` answers what the policy raised itself
            log.error("planning failed: %s", failure)
            failed = PlanOutcome(None, error=RuntimeError(f"planning failed: {failure}"))
            self._put(PlanDone(needed.ticket, failed))
            return
        self._timed(needed, asked)
        self._put(PlanDone(needed.ticket, made.result()))

    def _timed(self, needed: PlanNeeded, asked: float) -> None:
        made = time.monotonic()
        self.timings.append(PlanTiming(asked, made, len(needed.work.request.jobs)))
        self._metrics.plan_time.observe(made - asked)

    def _lost_process(self, error: BaseException) -> None:
        """The planning process is gone: the next big plan starts a new one."""
        log.warning("the planning process failed (%s); planning in a thread", error)
        self._stop_process()

    def _stop_process(self) -> None:
        """Stop the planning process, whatever it is doing; the next big plan starts a new
        one. `shutdown` alone waits for the plan being made: kill its worker first
        (the executor keeps its processes in `_processes`; Python 3.14 has a public
        `terminate_workers`)."""
        pool, self._process = self._process, None
        if pool is None:
            return
        workers: dict[int, multiprocessing.process.BaseProcess] = getattr(pool, "_processes", {})
        for worker in list(workers.values()):
            worker.kill()  # SIGKILL: it keeps nothing, and SIGTERM may be ignored (inherited)
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Make no more plans; the one being made is dropped with the daemon (its process
        stopped; one in the thread ends with its plan)."""
        self._thread.shutdown(wait=False, cancel_futures=True)
        self._stop_process()
