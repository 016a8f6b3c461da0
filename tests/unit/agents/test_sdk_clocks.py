"""What a heartbeat says of a job's time: its loader workers' seconds a sample, their CPU
clocks and their waits for a core, the training thread's, each pass's first batch; and
what the SDK leaves out for a daemon of an older protocol. The tests that read CPU clocks
or wall time are `serial`: run alone, after the others (`make test`)."""

import os
import time
from pathlib import Path

import pytest
import torch

from agents.protocol import PROTOCOL_VARIABLE, VERSION, HeartbeatMessage, encode
from bench.agent_driver import Router
from tests.unit.agents.sdk_builders import Numbers, job


class Slow(Numbers):
    """Each sample takes a worker 10 ms (a sleep: the same on a busy machine)."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(0.01)
        return super().__getitem__(index)


def heartbeats(
    tmp_path: Path, workers: int, step_s: float, samples: int = 192
) -> list[HeartbeatMessage]:
    """The first two heartbeats of an epoch of `samples` of `Slow` under a daemon, `step_s`
    a step (two need the epoch to last past 0.6 s)."""
    router = Router(tmp_path / "agents.sock")
    try:
        sdk = job(
            tmp_path, STOKER_JOB_ID="j", STOKER_CONTROL=router.endpoint, STOKER_HEARTBEAT_S="0.3"
        )
        for _ in sdk.epochs(1):
            for _ in sdk.loader(Slow(samples), batch_size=4, shuffle=False, num_workers=workers):
                time.sleep(step_s)
        return [router.expect(HeartbeatMessage, timeout_s=10) for _ in range(2)]
    finally:
        router.close()


@pytest.mark.serial
@pytest.mark.parametrize("step_s", [0.0, 0.15])
def test_a_heartbeat_says_what_a_loader_worker_spends_per_sample(
    tmp_path: Path, step_s: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Starved (no step) the workers never idle; with a 150-ms step they make a batch in 40
    # and idle the rest. The time is theirs per sample either way, idle left out. The first
    # heartbeat's interval saw them start, a wait that would read as a soft bend: untimed.
    monkeypatch.setenv(PROTOCOL_VARIABLE, "4")  # as a daemon of this version launches it
    first, second = heartbeats(tmp_path, 2, step_s, 64 if step_s else 192)  # 2.4 s, 1 s
    assert first.loader_s == 0.0, first
    assert second.v == 4 and 0.009 < second.loader_s < 0.016, second


def test_to_a_daemon_from_before_version_4_the_sdk_speaks_3_and_leaves_the_timing_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PROTOCOL_VARIABLE, raising=False)  # such a daemon does not say
    beat = heartbeats(tmp_path, 2, 0.0)[1]
    assert beat.v == 3 and beat.loader_s == 0.0, beat
    assert b"loader_s" not in encode(beat), "a field such a daemon would refuse"


def spin(cpu_s: float) -> None:
    """Keep this process's CPU busy for `cpu_s` CPU seconds (however long that takes)."""
    until = time.process_time() + cpu_s
    while time.process_time() < until:
        pass


class Busy(Numbers):
    """Each sample takes a worker 4 ms of CPU."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        spin(0.004)
        return super().__getitem__(index)


def clocked_heartbeats(
    tmp_path: Path, dataset: Numbers, heartbeat_s: str = "0.3"
) -> list[HeartbeatMessage]:
    """The first three heartbeats of an epoch of `dataset` on 2 workers whose steps spend
    20 ms of CPU on a batch of 4 samples (5 ms a sample), under a daemon of this version."""
    router = Router(tmp_path / "agents.sock")
    try:
        sdk = job(
            tmp_path,
            STOKER_JOB_ID="j",
            STOKER_CONTROL=router.endpoint,
            STOKER_HEARTBEAT_S=heartbeat_s,
        )
        for _ in sdk.epochs(1):
            for _ in sdk.loader(dataset, batch_size=4, shuffle=False, num_workers=2):
                spin(0.02)
        return [router.expect(HeartbeatMessage, timeout_s=10) for _ in range(3)]
    finally:
        router.close()


# Two workers on one core is the point here, which PyTorch warns of.
@pytest.mark.serial
@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
def test_a_heartbeat_says_the_cpu_a_sample_costs_and_how_long_its_loaders_waited_for_a_core(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CPU seconds, not wall: the same on an idle machine and a busy one. Pinned to one core
    with its two workers, the training thread and the workers share it: a worker waits for
    the core about as long as it runs on it, and its wall time is the two together."""
    monkeypatch.setenv(PROTOCOL_VARIABLE, str(VERSION))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # it trains on CPUs
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})  # the workers it forks inherit it
    try:
        beat = clocked_heartbeats(tmp_path, Busy(192))[2]  # 9 ms a sample on one core: 1.7 s
    finally:
        os.sched_setaffinity(0, allowed)
    assert 0.0035 < beat.loader_cpu_s < 0.006, beat
    assert beat.loader_wait_s > 0.5 * beat.loader_cpu_s, beat
    assert beat.loader_cpu_s + beat.loader_wait_s == pytest.approx(beat.loader_s, rel=0.25)
    assert 0.0085 < beat.cpu_s < 0.02, beat  # 5 ms training and 4 ms loading a sample
    # The training thread waits for the core its workers hold: the share it got says so.
    assert 0.004 < beat.train_cpu_s < 0.009, beat  # the step's 5 ms a sample
    assert beat.train_wait_s > 0.3 * beat.train_cpu_s, beat


@pytest.mark.serial
def test_a_worker_waiting_on_its_data_is_not_waiting_for_a_core(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that sleeps for its samples (as one reading a slow disk) spends wall time,
    almost no CPU, and no time queued for a core."""
    monkeypatch.setenv(PROTOCOL_VARIABLE, str(VERSION))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # it trains on CPUs
    first, _, sleepy = clocked_heartbeats(tmp_path, Slow(288))
    # Its workers' start is the wait for the first batch, said apart: the rest is timed.
    assert 0.0 < first.refill_s <= first.idle_s, first
    assert first.loader_s > 0.009 and first.cpu_s > 0.0, first
    assert sleepy.loader_s > 0.009, sleepy
    assert sleepy.loader_cpu_s < 0.3 * sleepy.loader_s, sleepy
    assert sleepy.loader_wait_s < 0.3 * sleepy.loader_s, sleepy
    assert 0.005 < sleepy.cpu_s < 0.012, sleepy  # the step's 5 ms, the loaders' little
    assert sleepy.train_cpu_s > 0.004, "the step's 5 ms a sample: measured"
    assert sleepy.train_wait_s < 0.3 * sleepy.train_cpu_s, "two cores, sleepy workers"


def test_short_epochs_wait_mostly_for_their_first_batch_and_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Epochs of two batches, each starting its workers afresh (PyTorch's default): most of
    the wait is each pass's first batch, a cost per pass that more workers do not cut."""
    monkeypatch.setenv(PROTOCOL_VARIABLE, str(VERSION))
    router = Router(tmp_path / "agents.sock")
    try:
        sdk = job(
            tmp_path, STOKER_JOB_ID="j", STOKER_CONTROL=router.endpoint, STOKER_HEARTBEAT_S="0.3"
        )
        for _ in sdk.epochs(12):
            for _ in sdk.loader(Slow(8), batch_size=4, shuffle=False, num_workers=2):
                spin(0.02)
        beats = [router.expect(HeartbeatMessage, timeout_s=10) for _ in range(3)]
    finally:
        router.close()
    assert all(0.0 < beat.refill_s <= beat.idle_s for beat in beats), beats
    assert sum(beat.refill_s for beat in beats) > 0.6 * sum(beat.idle_s for beat in beats)


def test_a_daemon_of_version_5_gets_no_wall_clock_where_a_pass_began(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It does not read the waits for a pass's first batch apart: the interval that saw the
    workers start would read as loaders slower than they are."""
    monkeypatch.setenv(PROTOCOL_VARIABLE, "5")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # it trains on CPUs
    # Which fields a heartbeat holds, not their figures: 3 of 0.1 s in 0.64 s of CPU or more.
    first, second, _ = clocked_heartbeats(tmp_path, Busy(128), heartbeat_s="0.1")
    assert first.v == 5 and first.loader_s == first.cpu_s == 0.0, "its workers' start"
    assert second.loader_s > 0.0 and second.cpu_s > 0.0, second
    assert first.refill_s == first.train_cpu_s == second.train_wait_s == 0.0, "fields of v6"


def test_to_a_daemon_of_version_4_the_cpu_clocks_are_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PROTOCOL_VARIABLE, "4")
    beat = clocked_heartbeats(tmp_path, Busy(128), heartbeat_s="0.1")[2]  # as for version 5
    assert beat.v == 4 and beat.loader_s > 0.0, beat
    assert beat.cpu_s == beat.loader_cpu_s == beat.loader_wait_s == 0.0, "fields it would refuse"


def test_without_workers_nothing_is_timed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROTOCOL_VARIABLE, str(VERSION))
    beat = heartbeats(tmp_path, 0, 0.0)[1]
    assert beat.loader_s == beat.loader_cpu_s == 0.0  # the main process loads: the step's
    assert beat.cpu_s > 0.0, "and its CPU time is all the job's"
