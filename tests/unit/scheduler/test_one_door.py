"""`Scheduler.handle` is the only public way to change the core (issue 38): every other
public name reads, and reading leaves the core as it was. A new public method fails the
first test until it is named a read here, and then the second proves it one."""

import inspect
import pickle
from collections.abc import Callable
from typing import Any

from allocator import NodeSpec
from allocator.contention import ContentionCurve
from scheduler.admission import GpuPool
from scheduler.config import SchedulerConfig
from scheduler.messages import AgentHello, Heartbeat, JobSubmitted, Tick
from scheduler.rates import RateModel
from scheduler.scheduler import Scheduler
from tests.unit.scheduler.builders import job

# Each read, called as the adapters call it.
READS: dict[str, Callable[[Scheduler], Any]] = {
    "generation": lambda core: core.generation,
    "planning": lambda core: core.planning,
    "status": lambda core: core.status("a"),
    "jobs": lambda core: core.jobs(),
    "waiting_for_gpus": lambda core: core.waiting_for_gpus,
    "waiting": lambda core: core.waiting("c", 5.0),
    "exiting": lambda core: core.exiting,
    "awaiting_hello": lambda core: core.awaiting_hello("a"),
    "cold_paused": lambda core: core.cold_paused("a"),
    "exiting_gpus": lambda core: core.exiting_gpus(),
    "placement_for": lambda core: core.placement_for(1),
    "node": lambda core: core.node,
    "contention_learned": lambda core: core.contention_learned,
    "measured_loads": lambda core: core.measured_loads(),
    "config": lambda core: core.config,
    "loader_processes": lambda core: core.loader_processes(),
    "next_deadline": lambda core: core.next_deadline(),
}


def busy_core() -> Scheduler:
    """Two GPUs, two jobs running (one has spoken), a third waiting for a GPU."""
    core = Scheduler(
        NodeSpec(cpu_workers=12, contention=ContentionCurve.contention_free()),
        RateModel(),
        SchedulerConfig(arrival_window_s=0.0, completion_window_s=0.0),
        GpuPool(2),
    )
    for job_id in ("a", "b", "c"):
        core.handle(JobSubmitted(job(job_id)), 0.0)
    core.handle(Tick(), 1.0)
    core.handle(AgentHello("a", gen=core.generation, iteration=0), 1.5)
    beat = Heartbeat("a", core.generation, 20, samples_per_s=900.0, idle_fraction=0.1,
                     workers_per_gpu=6)  # fmt: skip
    core.handle(beat, 2.0)
    return core


def test_handle_is_the_only_public_name_that_is_not_a_read() -> None:
    public = {name for name in dir(Scheduler) if not name.startswith("_")}
    assert public == {"handle", *READS}
    for name in public:
        attribute = inspect.getattr_static(Scheduler, name)
        if isinstance(attribute, property):
            assert attribute.fset is None, f"{name} can be assigned"


def test_every_read_leaves_the_core_as_it_was() -> None:
    core = busy_core()
    assert core.status("c").state.value == "submitted", "the scene has a job waiting"
    for name, read in READS.items():
        before = pickle.dumps(core)
        read(core)
        assert pickle.dumps(core) == before, f"{name} changed the core"


def test_the_check_sees_a_read_that_writes() -> None:
    core = busy_core()
    before = pickle.dumps(core)
    core.handle(JobSubmitted(job("d")), 3.0)  # a mutator, called as a read would be
    assert pickle.dumps(core) != before
