"""The daemon's planner (daemon/planner.py): plans the core asks for are made off the event
loop, a small one in a thread and a big one in a process of its own, and come back on the
queue as the plan `work_out` makes; a planning process that dies costs no plan."""

import asyncio
import multiprocessing
import os
import signal

from bench.bench_allocator import make_request
from daemon.items import Item, PlanDone
from daemon.metrics import Metrics
from daemon.planner import PROCESS_FROM_JOBS, Planner
from scheduler.messages import PlanAbandoned, PlanMade, PlanNeeded, PlanWork
from scheduler.planning import work_out


def needed(ticket: int, jobs: int) -> PlanNeeded:
    request = make_request(jobs, (1, 2, 4), seed=ticket, work_left=True)
    return PlanNeeded(ticket, PlanWork(request, "lookahead", (None,) * jobs))


async def made_off_loop(planner: Planner, queue: asyncio.Queue[Item], ask: PlanNeeded) -> PlanDone:
    planner.make(ask)
    item = await asyncio.wait_for(queue.get(), 120.0)
    assert isinstance(item, PlanDone) and item.ticket == ask.ticket
    return item


def test_plans_come_back_on_the_queue_as_work_out_makes_them() -> None:
    async def scenario() -> None:
        queue: asyncio.Queue[Item] = asyncio.Queue()
        fed: list[PlanMade] = []
        metrics = Metrics()
        planner = Planner(queue.put_nowait, fed.append, metrics, off_loop=True)
        try:
            for ticket, jobs in ((1, 4), (2, PROCESS_FROM_JOBS), (3, 32)):
                ask = needed(ticket, jobs)
                done = await made_off_loop(planner, queue, ask)
                assert done.outcome == work_out(ask.work)
            # The small one in the thread, the big ones in one process, started once.
            assert [timing.jobs for timing in planner.timings] == [4, PROCESS_FROM_JOBS, 32]
            assert len(multiprocessing.active_children()) == 1
            assert not fed  # nothing is fed from where the plan was made
            count = metrics.registry.get_sample_value("stoker_plan_seconds_count")
            assert count == 3
        finally:
            planner.close()

    asyncio.run(scenario())


def test_a_planning_process_that_dies_costs_no_plan() -> None:
    async def scenario() -> None:
        queue: asyncio.Queue[Item] = asyncio.Queue()
        planner = Planner(queue.put_nowait, lambda _: None, Metrics(), off_loop=True)
        try:
            await made_off_loop(planner, queue, needed(1, PROCESS_FROM_JOBS))
            (child,) = multiprocessing.active_children()
            os.kill(child.pid or 0, signal.SIGKILL)
            child.join(30.0)
            ask = needed(2, PROCESS_FROM_JOBS)
            done = await made_off_loop(planner, queue, ask)  # made again, in the thread
            assert done.outcome == work_out(ask.work)
            # and the next big plan has a process again
            await made_off_loop(planner, queue, needed(3, PROCESS_FROM_JOBS))
            assert len(multiprocessing.active_children()) == 1
        finally:
            planner.close()

    asyncio.run(scenario())


def test_a_hand_held_planner_feeds_the_plan_back_at_once() -> None:
    queue: asyncio.Queue[Item] = asyncio.Queue()
    fed: list[PlanMade] = []
    planner = Planner(queue.put_nowait, fed.append, Metrics(), off_loop=False)
    ask = needed(5, 3)
    planner.make(ask)
    assert fed == [PlanMade(5, work_out(ask.work))] and queue.empty()


def test_a_plan_given_up_stops_its_process_and_the_next_starts_a_new_one() -> None:
    async def scenario() -> None:
        queue: asyncio.Queue[Item] = asyncio.Queue()
        planner = Planner(queue.put_nowait, lambda _: None, Metrics(), off_loop=True)
        try:
            await made_off_loop(planner, queue, needed(1, PROCESS_FROM_JOBS))
            (first,) = multiprocessing.active_children()
            planner.abandon(PlanAbandoned(2, PROCESS_FROM_JOBS, 120.0))
            first.join(30.0)
            assert not first.is_alive()
            ask = needed(3, PROCESS_FROM_JOBS)
            done = await made_off_loop(planner, queue, ask)
            assert done.outcome == work_out(ask.work)
            (second,) = multiprocessing.active_children()
            assert second.pid != first.pid
        finally:
            planner.close()

    asyncio.run(scenario())
