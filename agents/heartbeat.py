"""What a heartbeat measures (agents/control.py sends it): the time since the last one,
split into waiting for data and computing (`Meter`), a loader worker's seconds per sample
from its clocks (agents/loaderclock.py), and the job's CPU seconds per sample, its training
thread's among them. Plain arithmetic over clocks read on the training thread: the
message itself is built on the link's thread.
"""

import time
from dataclasses import dataclass, field

from agents.loaderclock import Clocked, thread_clocks

REFILL_VERSION = 6  # the protocol version that brought `refill_s`


@dataclass
class Meter:
    """Time since the last heartbeat, split into waiting for data and computing."""

    started: float = field(default_factory=time.monotonic)
    cpu_started: float = field(default_factory=time.process_time)  # this process's threads
    # The training thread's seconds on a core and in the run queue (`thread_clocks`): the
    # meter is made on the thread that trains, at each heartbeat.
    thread_started: tuple[float, float] = field(default_factory=thread_clocks)
    idle_s: float = 0.0
    refill_s: float = 0.0  # of idle_s: the waits for the first batch of a pass
    step_s: float = 0.0
    steps: int = 0
    samples: int = 0  # handed to the script, all ranks


@dataclass(frozen=True)
class LoaderRates:
    """A loader worker's seconds per sample over an interval: wall, on a core, and in the
    run queue waiting for one (0: not timed)."""

    seconds: float = 0.0
    cpu_seconds: float = 0.0
    wait_seconds: float = 0.0


def loader_rates(clocked: Clocked, then: Clocked, version: int) -> LoaderRates | None:
    """A worker's seconds per sample between two readings of its loader's clock; None when
    the interval is not timed (no sample made, or a pass began for an old daemon)."""
    made = clocked.samples - then.samples
    # A daemon of version 6 reads the waits for a pass's first batch apart (`refill_s`), so
    # every interval is timed for it. An older one reads all of an interval's idle share as
    # its loaders': in an interval in which a pass began (each epoch's, each resize's) that
    # holds the pipeline filling, a cost per pass, which it would read as a softer bend
    # than the loaders have. It gets no clocks there, as before.
    if version < REFILL_VERSION and clocked.starts != then.starts:
        made = 0
    if made <= 0:
        return None
    return LoaderRates(
        seconds=(clocked.seconds - then.seconds) / made,
        cpu_seconds=(clocked.cpu_seconds - then.cpu_seconds) / made,
        wait_seconds=(clocked.wait_seconds - then.wait_seconds) / made,
    )


def training_rates(
    meter: Meter, world_size: int, timed: bool, loader_cpu_s: float, trains_on_cpus: bool
) -> tuple[float, float, float]:
    """The job's CPU seconds per sample (0 unless its loading is `timed`), and its training
    thread's seconds per sample on a core and waiting for one (0 unless it `trains_on_cpus`:
    on a GPU the step is the GPU's, however long the thread waits for a core meanwhile)."""
    cpu_s = train_cpu_s = train_wait_s = 0.0
    if timed and meter.samples > 0:  # this rank's share of the samples, as every rank's
        training = (time.process_time() - meter.cpu_started) * world_size
        cpu_s = training / meter.samples + loader_cpu_s
    if trains_on_cpus and meter.samples > 0:
        # Per sample of the job, as wall time: the ranks wait side by side, so one rank's
        # thread says it (not summed over the ranks, as CPU seconds are).
        ran, waited = thread_clocks()
        if ran > meter.thread_started[0]:
            train_cpu_s = (ran - meter.thread_started[0]) / meter.samples
            train_wait_s = max(0.0, waited - meter.thread_started[1]) / meter.samples
    return cpu_s, train_cpu_s, train_wait_s
