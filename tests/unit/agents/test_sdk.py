"""The SDK in one process, without a daemon (or with its end of the protocol by hand): the
loader's position across worker changes and restarts, tracked state, checkpoints, metrics,
the job's allocation and its callbacks. Real torch on a tiny model."""

import atexit
import contextlib
import datetime
import gc
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import zmq
from torch import nn
from torch.utils.data import IterableDataset, get_worker_info

import stoker
from agents import checkpoints
from agents.control import Allocation
from agents.environment import JobEnvironment
from agents.loader import Position, ResizableLoader
from agents.protocol import (
    PROTOCOL_VARIABLE,
    VERSION,
    FinishedMessage,
    HeartbeatMessage,
    Hello,
    PauseMessage,
    ResumeMessage,
    ShareMessage,
    decode_agent,
)
from agents.sdk import Job
from bench.agent_driver import Router
from tests.unit.agents.sdk_builders import Numbers, job


def test_every_sample_once_per_epoch_across_worker_changes(tmp_path: Path) -> None:
    sdk = job(tmp_path)
    loader = sdk.loader(Numbers(50), batch_size=4, shuffle=True, seed=3)
    seen: list[int] = []
    for step, (_, indices) in enumerate(loader):
        seen += indices.tolist()
        if step == 2:
            loader.workers = 2  # the scheduler's new count, from the next batch on
        if step == 6:
            loader.workers = 1
    assert sorted(seen) == list(range(50))
    assert seen != list(range(50)), "shuffled"
    assert loader.position.epoch == 1 and loader.position.consumed == 0
    second = [i for _, batch in loader for i in batch.tolist()]
    assert sorted(second) == list(range(50)) and second != seen, "a new order each epoch"


class Pids(Numbers):
    """Sample i is (the pid of the process that loaded it, i)."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.tensor([os.getpid()]), index


@pytest.mark.parametrize("persistent", [True, False])
def test_persistent_workers_live_on_from_epoch_to_epoch_until_a_resize(
    tmp_path: Path, persistent: bool
) -> None:
    sdk = job(tmp_path)
    loader = sdk.loader(
        Pids(24), batch_size=4, shuffle=True, num_workers=2, persistent_workers=persistent
    )
    epochs: list[set[int]] = []
    seen: list[list[int]] = []
    for epoch in sdk.epochs(4):
        pids: set[int] = set()
        seen.append([])
        for step, (pid, indices) in enumerate(loader):
            pids.update(pid.flatten().tolist())
            seen[-1] += indices.tolist()
            if epoch == 2 and step == 1:
                loader.workers = 1  # a resize mid-epoch: a new worker, whatever the flag
        epochs.append(pids)
    assert all(sorted(indices) == list(range(24)) for indices in seen), "each sample once"
    assert len(epochs[0]) == 2 and len(epochs[3]) == 1
    # Every epoch's pass begins with its pipeline filling, kept workers or new: heartbeats
    # spanning one are not timed (agents/control.py). 4 epochs and a resize: 5 passes.
    assert loader.clock.totals().starts == 5
    if persistent:  # as PyTorch's flag says: the same workers, epoch after epoch
        assert epochs[1] == epochs[0] and epochs[2] == epochs[1] | epochs[3]
    else:  # PyTorch's default: new workers each epoch
        assert not epochs[0] & epochs[1] and not epochs[2] & epochs[3]


class SlowForTwo(Numbers):
    """Numbers whose samples past the first take `SLOW_S` each in a loader of two workers,
    as a batch of large images or of remote reads does, and no time in any other."""

    SLOW_S = 4.0

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        worker = get_worker_info()
        if index > 0 and worker is not None and worker.num_workers == 2:
            time.sleep(self.SLOW_S)
        return super().__getitem__(index)


def test_a_resize_does_not_wait_for_the_batches_it_throws_away(tmp_path: Path) -> None:
    sdk = job(tmp_path)
    loader = sdk.loader(SlowForTwo(8), batch_size=1, shuffle=False, num_workers=2)
    batches = iter(loader)
    first = next(batches)[1].tolist()  # meanwhile both workers began a slow batch
    loader.workers = 1
    started = time.perf_counter()
    second = next(batches)[1].tolist()
    waited = time.perf_counter() - started
    # Before, the old workers were stopped first, each after its slow batch: 4 s at least.
    assert waited < SlowForTwo.SLOW_S / 2, f"the next batch came {waited:.1f} s after"
    rest = [index for _, batch in batches for index in batch.tolist()]
    assert first + second + rest == list(range(8)), "every sample once, in order"
    assert multiprocessing.active_children(), "the old workers are still on their batches"
    sdk._loaders.close()  # as the job does when it finishes or leaves
    assert not multiprocessing.active_children(), "none left to the interpreter's exit"


LEAVES_MID_EPOCH = """
import sys, tempfile
from pathlib import Path
from tests.unit.agents.sdk_builders import Numbers, job
sdk = job(Path(tempfile.mkdtemp()))
loader = sdk.loader(Numbers(64), batch_size=4, num_workers=2, persistent_workers=True)
for epoch in sdk.epochs(3):
    for step, _ in enumerate(loader):
        if epoch == 1 and step == 3:
            sdk._run.leave(cancelled=True)  # as a cancel or a cold resize leaves
"""


def test_a_job_that_leaves_stops_its_persistent_workers_first() -> None:
    # Left to the interpreter's exit, they were killed, and PyTorch wrote on stderr that a
    # DataLoader worker was "killed by signal: Terminated" (3 exits in 4 before the fix).
    root = Path(__file__).resolve().parents[3]
    for _ in range(2):
        run = subprocess.run(
            [sys.executable, "-c", LEAVES_MID_EPOCH], cwd=root, capture_output=True,
            text=True, timeout=60, check=False,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert "killed by signal" not in run.stderr, run.stderr


class Steps:
    """The loader's job, counting boundaries (the split alone needs no process group)."""

    def __init__(self) -> None:
        self.batches = self.boundaries = 0
        self.ended = self.evaluation = False

    def on_batch(self, samples: int, refill: bool = False, evaluation: bool = False) -> None:
        self.batches += 1
        self.evaluation = evaluation

    def at_boundary(self) -> None:
        self.boundaries += 1

    def step_ended(self) -> None:
        self.ended = True


def test_ranks_split_each_global_batch_and_cover_the_epoch_once() -> None:
    per_rank = []
    for rank in range(3):
        steps = Steps()
        loader = ResizableLoader(
            Numbers(31), batch_size=2, shuffle=False, drop_last=False, rank=rank,
            world_size=3, workers=0, position=Position(), job=steps, dataloader_kwargs={},
        )  # fmt: skip
        per_rank.append([batch.tolist() for _, batch in loader])
        assert steps.boundaries == len(per_rank[-1]) - 1, "the epoch's last is Job.epochs'"
    assert len({len(batches) for batches in per_rank}) == 1, "every rank takes every step"
    assert all(batch for batches in per_rank for batch in batches), "no rank gets an empty one"
    flat = sorted(i for batches in per_rank for batch in batches for i in batch)
    assert flat == list(range(31))


def test_a_checkpoint_brings_back_model_optimizer_values_and_the_position(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, sdk = nn.Linear(2, 1), job(tmp_path)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = sdk.loader(Numbers(20), batch_size=4, seed=1)
    sdk.track(model=model, optimizer=optimizer, note={"best": 1.5})
    first = []
    for step, (x, indices) in enumerate(loader):
        first += indices.tolist()
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
        if step == 1:
            sdk.checkpoint()
            break
    weights = model.weight.detach().clone()

    again, model2 = job(tmp_path), nn.Linear(2, 1)
    optimizer2 = torch.optim.SGD(model2.parameters(), lr=0.1)
    loader2 = again.loader(Numbers(20), batch_size=4, seed=1)
    again.track(model=model2, optimizer=optimizer2, note={"best": 9.9})
    assert again.resumed and again.step == 2
    assert torch.equal(model2.weight, weights)
    assert again.state["note"] == {"best": 1.5}
    rest = [i for _, batch in loader2 for i in batch.tolist()]
    assert sorted(first + rest) == list(range(20)), "the epoch goes on where it stopped"


def test_a_checkpoint_over_a_dataset_of_another_length_starts_its_epoch_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sdk = job(tmp_path)
    loader = sdk.loader(Numbers(20), batch_size=4, seed=1)
    for step, _ in enumerate(loader):
        if step == 1:
            sdk.checkpoint()  # 8 of epoch 0's 20 consumed
            break
    again = job(tmp_path)  # continued on other data: 12 samples, not 20
    rest = [
        i for _, batch in again.loader(Numbers(12), batch_size=4, seed=1) for i in batch.tolist()
    ]
    assert sorted(rest) == list(range(12)), "every sample of the new data once"
    said = capsys.readouterr().err
    assert "the checkpoint's loader had 20 samples and this dataset has 12" in said
    assert "epoch 0 starts again from its first sample" in said


def test_a_job_that_continues_another_starts_from_its_checkpoint_until_it_has_its_own(
    tmp_path: Path,
) -> None:
    ended = Job(JobEnvironment.read({}, tmp_path / "ended", checkpoint_every_s=3600.0))
    loader = ended.loader(Numbers(8), batch_size=4, shuffle=False)
    for _ in ended.epochs(1):
        for _ in loader:
            pass
    assert ended.step == 2
    given = {"STOKER_CONTINUE_FROM": str(tmp_path / "ended" / "checkpoints")}
    later = Job(JobEnvironment.read(given, tmp_path / "later", checkpoint_every_s=3600.0))
    rest = later.loader(Numbers(8), batch_size=4, shuffle=False)
    assert later.resumed and later.step == 2
    epochs = [(epoch, [batch.tolist() for _, batch in rest]) for epoch in later.epochs(2)]
    assert epochs == [(1, [[0, 1, 2, 3], [4, 5, 6, 7]])], "it goes on with the ended one's next"
    relaunched = Job(JobEnvironment.read(given, tmp_path / "later", checkpoint_every_s=3600.0))
    assert relaunched.step == 4, "its own checkpoint, once it has one, comes first"
    gone = {"STOKER_CONTINUE_FROM": str(tmp_path / "removed")}
    with pytest.raises(FileNotFoundError, match="STOKER_CONTINUE_FROM: no checkpoint in"):
        Job(JobEnvironment.read(gone, tmp_path / "third", checkpoint_every_s=3600.0))


def test_a_value_tracked_again_is_what_the_next_checkpoint_keeps(tmp_path: Path) -> None:
    # A counter a script keeps: restored once, then each `track` of it is its new value.
    model = nn.Linear(2, 1)
    for run in range(3):
        sdk = job(tmp_path)
        sdk.track(count=0, model=model)
        count = sdk.state["count"]
        assert count == 4 * run, f"run {run} goes on from the count the last one saved"
        weights = model.weight.detach().clone()
        for step in range(4):
            count += 1
            sdk.track(count=count, model=model)  # again: no checkpoint is read back now
            assert torch.allclose(model.weight, weights + step), "the model is not restored again"
            with torch.no_grad():
                model.weight += 1.0
        sdk.checkpoint()


def test_only_the_newest_two_checkpoints_stay(tmp_path: Path) -> None:
    sdk = job(tmp_path)
    sdk.track(count=0)
    paths = [sdk.checkpoint() for _ in range(4)]
    kept = checkpoints.checkpoint_files(tmp_path / "out" / "checkpoints")
    assert kept == paths[-2:]
    assert not list((tmp_path / "out" / "checkpoints").glob(".*.tmp"))


def test_epochs_resume_mid_epoch_and_end_with_a_final_checkpoint(tmp_path: Path) -> None:
    sdk = job(tmp_path)
    loader = sdk.loader(Numbers(8), batch_size=4, shuffle=False)
    done = []
    for epoch in sdk.epochs(3):
        for _, batch in loader:
            done.append((epoch, batch.tolist()))
    assert [epoch for epoch, _ in done] == [0, 0, 1, 1, 2, 2]
    final = checkpoints.read(checkpoints.latest(tmp_path / "out" / "checkpoints"))  # type: ignore[arg-type]
    assert final["epoch"] == 3 and final["step"] == 6
    # A job of the daemon's relaunched after it (its `finished` lost): nothing left.
    again = job(tmp_path, STOKER_JOB_ID="j")
    again.loader(Numbers(8), batch_size=4, shuffle=False)
    assert list(again.epochs(3)) == [], "a finished job has nothing left"


@pytest.mark.parametrize(("drop_last", "per_epoch"), [(False, 8), (True, 7)])
def test_the_sdk_knows_the_step_its_epochs_end_at_and_a_resumed_run_too(
    tmp_path: Path, drop_last: bool, per_epoch: int
) -> None:
    # 30 samples in batches of 4: 7 full and one of 2, unless it is dropped.
    sdk = job(tmp_path)
    loader = sdk.loader(Numbers(30), batch_size=4, drop_last=drop_last)
    assert sdk.planned_iterations() == 0, "no epochs() runs yet: unknown"
    seen = []
    for _ in sdk.epochs(3):
        for _ in loader:
            seen.append(sdk.planned_iterations())
            if sdk.step == per_epoch + 3:
                sdk.checkpoint()  # then it crashes
                break
        else:
            continue
        break
    assert seen == [3 * per_epoch] * (per_epoch + 3)
    again = job(tmp_path)
    again_loader = again.loader(Numbers(30), batch_size=4, drop_last=drop_last)
    ends = [again.planned_iterations() for _ in again.epochs(3) for _ in again_loader]
    assert ends == [3 * per_epoch] * (2 * per_epoch - 3), "from its checkpoint, the same end"
    assert again.step == 3 * per_epoch


def test_an_evaluation_loader_s_steps_count_once_an_epoch_has_run_whole(tmp_path: Path) -> None:
    # Each epoch: 8 training batches, then 2 of an evaluation loader (steps too).
    sdk = job(tmp_path)
    train = sdk.loader(Numbers(32), batch_size=4)
    evaluate = sdk.loader(Numbers(8), batch_size=4, shuffle=False)
    seen, at_boundaries = [], {}
    boundary = sdk._run.at_boundary  # what the loaders and the epochs call

    def heartbeat_there() -> None:  # where a heartbeat may go out
        at_boundaries[sdk.step] = sdk.planned_iterations()
        boundary()

    sdk._run.at_boundary = heartbeat_there  # type: ignore[method-assign]
    for _ in sdk.epochs(3):
        for loader in (train, evaluate):
            for _ in loader:
                seen.append(sdk.planned_iterations())
    assert sdk.step == 30
    # Steps 10 and 20 end an epoch (an epoch's last batch has no boundary of its own).
    assert [at_boundaries[10], at_boundaries[20]] == [30, 30], "not one epoch short there"
    assert seen[:10] == [24] * 8 + [25, 26], "first: the steps taken and its first loader's"
    assert seen[10:] == [30] * 20, "then what a whole epoch took"


def test_a_heartbeat_says_the_step_the_job_ends_at_and_the_samples_its_steps_take(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PROTOCOL_VARIABLE, str(VERSION))  # as a daemon of this version launches it
    router = Router(tmp_path / "agents.sock")
    try:
        sdk = job(
            tmp_path, STOKER_JOB_ID="j", STOKER_CONTROL=router.endpoint, STOKER_HEARTBEAT_S="0.1"
        )
        loader = sdk.loader(Numbers(42), batch_size=4, num_workers=0)  # 10 steps of 4, one of 2
        evaluation = sdk.loader(Numbers(16), batch_size=8, shuffle=False)  # larger steps
        for _ in sdk.epochs(2):
            for _ in loader:
                time.sleep(0.02)
            for _ in evaluation:
                pass
        beats = [router.expect(HeartbeatMessage, timeout_s=10)]
        assert 0 < beats[0].iteration < beats[0].total_iterations, beats[0]
        while beats[-1].iteration <= 13 and not beats[-1].last:  # past epoch 0's evaluation
            beats.append(router.expect(HeartbeatMessage, timeout_s=10))
        assert {beat.batch_samples for beat in beats} == {4}, "the training loader's step"
    finally:
        router.close()


def test_a_stop_signal_checkpoints_at_the_next_boundary_and_exits(tmp_path: Path) -> None:
    sdk = job(tmp_path)
    loader = sdk.loader(Numbers(40), batch_size=4, shuffle=False)
    seen: list[int] = []
    with pytest.raises(SystemExit) as leaving:
        for step, (_, batch) in enumerate(loader):
            seen += batch.tolist()
            if step == 3:
                sdk.on_signal(signal.SIGINT, None)  # as Ctrl-C would
    assert leaving.value.code == 128 + signal.SIGINT
    assert seen == list(range(16)), "it left right after the batch in hand"
    again = job(tmp_path)
    rest = [
        i
        for _, batch in again.loader(Numbers(40), batch_size=4, shuffle=False)
        for i in batch.tolist()
    ]
    assert seen + rest == list(range(40))


def test_a_stop_during_an_epochs_last_batch_waits_for_the_scripts_end_of_epoch(
    tmp_path: Path,
) -> None:
    sdk = job(tmp_path)
    loader = sdk.loader(Numbers(8), batch_size=4, shuffle=False)
    ends = []
    with pytest.raises(SystemExit):
        for epoch in sdk.epochs(3):
            for step, _ in enumerate(loader):
                if (epoch, step) == (0, 1):
                    sdk.on_signal(signal.SIGINT, None)  # Ctrl-C during the epoch's last batch
            ends.append(epoch)  # the script's end of an epoch: a print, a scheduler step
    assert ends == [0], "the end of epoch 0 ran, once"
    again = job(tmp_path)
    rest = again.loader(Numbers(8), batch_size=4, shuffle=False)
    epochs = [(epoch, [batch.tolist() for _, batch in rest]) for epoch in again.epochs(3)]
    assert epochs == [(1, [[0, 1, 2, 3], [4, 5, 6, 7]]), (2, [[0, 1, 2, 3], [4, 5, 6, 7]])]


class Crash(Exception):
    """The script dies right after its own checkpoint."""


@pytest.mark.parametrize("where", ["after the last batch", "after the epoch's loop"])
def test_a_scripts_own_checkpoint_at_an_epochs_end_resumes_with_the_next_epoch(
    tmp_path: Path, where: str
) -> None:
    sdk = job(tmp_path)
    loader = sdk.loader(Numbers(8), batch_size=4, shuffle=False)
    with pytest.raises(Crash):
        for _ in sdk.epochs(3):
            for step, _ in enumerate(loader):
                if where == "after the last batch" and step == 1:
                    sdk.checkpoint()
                    raise Crash
            if where == "after the epoch's loop":
                sdk.checkpoint()
                raise Crash
    again = job(tmp_path)
    rest = again.loader(Numbers(8), batch_size=4, shuffle=False)
    epochs = [(epoch, [batch.tolist() for _, batch in rest]) for epoch in again.epochs(3)]
    # Epoch 0's samples were all consumed: no empty epoch 0 (whose loop-end code would find
    # no `loss`), nor epoch 1's data under epoch 0's number.
    assert epochs == [(1, [[0, 1, 2, 3], [4, 5, 6, 7]]), (2, [[0, 1, 2, 3], [4, 5, 6, 7]])]
    assert again.step == 6


def test_a_script_counting_its_own_epochs_trains_each_once_across_its_own_checkpoint(
    tmp_path: Path,
) -> None:
    # Its own loop and its own count, checkpointed on an epoch's last batch: the resumed
    # run's count goes on from that epoch, and so must the data (no epoch of data extra).
    trained = []
    for run in range(2):
        sdk = job(tmp_path)
        sdk.track(epoch=0)
        loader = sdk.loader(Numbers(8), batch_size=4, shuffle=False)
        with contextlib.suppress(Crash):
            for epoch in range(sdk.state["epoch"], 3):
                sdk.track(epoch=epoch)
                for step, (_, batch) in enumerate(loader):
                    trained.append((epoch, batch.tolist()))
                    if (run, epoch, step) == (0, 0, 1):
                        sdk.checkpoint()
                        raise Crash
    assert [epoch for epoch, _ in trained] == [0, 0, 1, 1, 2, 2], "three epochs of data"


def reported(tmp_path: Path) -> list[dict[str, object]]:
    text = (tmp_path / "out" / "metrics.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def test_reports_keep_tensors_until_a_flush_and_write_numbers(tmp_path: Path) -> None:
    sdk = job(tmp_path)
    for step, _ in enumerate(sdk.loader(Numbers(12), batch_size=4)):
        sdk.report(loss=torch.tensor(1.0 / (step + 1)), lr=0.1)
    assert all(isinstance(values["loss"], torch.Tensor) for _, values in sdk._metrics.pending)
    sdk._metrics.flush()
    lines = reported(tmp_path)
    assert [line["step"] for line in lines] == [1, 2, 3], "the loader's steps"
    assert lines[1]["loss"] == pytest.approx(0.5) and lines[0]["lr"] == 0.1


def test_a_script_without_a_loader_reports_at_its_calls_or_its_own_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A script that iterates a DataLoader of its own: every value was at step 0 before,
    # and the whole curve showed as one point.
    sdk = job(tmp_path)
    for step in range(3):
        sdk.report(loss=1.0 / (step + 1))
    sdk.report(step=np.int64(10), val_loss=0.2)  # a step of its own, as NumPy counts
    sdk.report(loss=0.1)  # after it
    sdk.report(step=torch.tensor(12), loss=0.05)  # a 0-d tensor's
    with pytest.raises(ValueError, match=r"job.report\(step=...\): a whole number >= 0"):
        sdk.report(step=-1, loss=0.0)
    sdk._metrics.flush()
    assert [line["step"] for line in reported(tmp_path)] == [1, 2, 3, 10, 11, 12]
    assert reported(tmp_path)[3] == {"step": 10, "val_loss": 0.2}, "not a metric named step"
    said = capsys.readouterr().err
    assert said.count("no job.loader counts this script's steps") == 1


def test_a_reported_value_that_is_no_number_is_kept_in_the_file_and_said_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sdk = job(tmp_path)
    for _ in sdk.loader(Numbers(8), batch_size=4):
        sdk.report(loss=0.5, phase="train")
    sdk._metrics.flush()
    said = capsys.readouterr().err
    assert said.count("job.report(phase=...): a str goes to metrics.jsonl") == 1
    assert reported(tmp_path)[0] == {"step": 1, "loss": 0.5, "phase": "train"}


def test_a_value_that_cannot_be_kept_is_refused_where_it_is_reported(tmp_path: Path) -> None:
    sdk = job(tmp_path)
    sdk.report(loss=np.float32(0.25), lr=np.float64(0.1))  # NumPy scalars: as numbers
    with pytest.raises(ValueError, match=r"job.report\(acc=...\): a tensor of 3 elements"):
        sdk.report(acc=torch.ones(3))
    with pytest.raises(TypeError, match=r"job.report\(when=...\): a datetime cannot be"):
        sdk.report(when=datetime.datetime(2026, 1, 1))
    with pytest.raises(TypeError, match=r"job.report\(at=...\): a datetime cannot be"):
        sdk.report(at=np.datetime64("2026-01-01T00:00:00"))  # NumPy's, read as a datetime
    sdk._metrics.flush()
    assert reported(tmp_path) == [{"step": 1, "loss": 0.25, "lr": 0.1}], "its first report"


def test_what_a_script_reports_after_its_last_epoch_is_written_at_once_and_no_job_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hooks: list[tuple[Callable[..., None], tuple[object, ...]]] = []
    monkeypatch.setattr(atexit, "register", lambda hook, *args: hooks.append((hook, args)))
    sdk = job(tmp_path)
    for _ in sdk.epochs(1):
        sdk.report(loss=0.5)
    sdk.report(test_acc=0.9)  # an evaluation after training, as scripts do, then a save
    written = (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()
    # No loader counts its steps: its reports do, this one its second.
    assert json.loads(written[-1]) == {"step": 2, "test_acc": 0.9}, "not left for the exit"
    ((hook, args),) = hooks
    hook(*args)  # the interpreter's exit
    assert (tmp_path / "out" / "metrics.jsonl").read_text().splitlines() == written
    del sdk
    gc.collect()
    (held,) = args
    assert isinstance(held, weakref.ref) and held() is None, "the hook keeps no job alive"


class Stream(IterableDataset[int]):
    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(range(10))


def test_an_iterable_dataset_runs_with_fixed_workers(tmp_path: Path) -> None:
    loader = job(tmp_path).loader(Stream(), batch_size=5, num_workers=0)
    assert not loader.resizable
    assert [batch.tolist() for batch in loader] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]


def test_under_a_daemon_an_iterable_dataset_says_its_workers_are_fixed(tmp_path: Path) -> None:
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    endpoint = f"ipc://{tmp_path / 'agents.sock'}"
    router.bind(endpoint)
    try:
        streaming = job(
            tmp_path, STOKER_JOB_ID="s", STOKER_CONTROL=endpoint, STOKER_JOB_DIR=str(tmp_path)
        )
        streaming.loader(Stream(), batch_size=5)
        hellos: list[bool] = []
        while router.poll(2000, zmq.POLLIN) and len(hellos) < 2:
            hello = decode_agent(router.recv_multipart()[-1])
            assert isinstance(hello, Hello)
            hellos.append(hello.resizable)
        assert hellos == [True, False], "said again, once its loader cannot resize"
        assert streaming.control is not None
        streaming.control.close()
    finally:
        router.close()
        context.term()


def test_the_loader_refuses_what_it_owns(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"sampler: .*leave it out: job\.loader shuffles"):
        job(tmp_path).loader(Numbers(4), batch_size=2, sampler=[0, 1, 2, 3])
    with pytest.raises(ValueError, match="batch_size"):
        job(tmp_path).loader(Numbers(4), batch_size=0)
    with pytest.raises(ValueError, match="STOKER_WORKERS"):
        job(tmp_path, STOKER_WORKERS="many")


def test_a_batch_larger_than_the_dataset_is_refused_naming_batch_size(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="batch_size: 5 is more than the dataset's 4 samples"):
        job(tmp_path).loader(Numbers(4), batch_size=5)
    two_ranks = job(tmp_path, RANK="0", WORLD_SIZE="2")
    with pytest.raises(ValueError, match=r"3 x 2 ranks = 6 samples per step.*at most 2"):
        two_ranks.loader(Numbers(4), batch_size=3)
    assert [len(batch[1]) for batch in job(tmp_path).loader(Numbers(4), batch_size=4)] == [4]


def test_the_launch_gives_the_allocation_and_alone_there_is_none(tmp_path: Path) -> None:
    assert job(tmp_path).allocation == Allocation(None, 0.0, "cpu")
    given = job(
        tmp_path, STOKER_WORKERS="3", STOKER_DECODE_MODE="device", STOKER_DECODER_SHARE="0.25"
    )
    assert given.allocation == Allocation(3, 0.25, "device")
    with pytest.raises(ValueError, match="STOKER_DECODE_MODE"):
        job(tmp_path, STOKER_DECODE_MODE="gpu")
    with pytest.raises(ValueError, match="STOKER_RESIZE"):
        job(tmp_path, STOKER_RESIZE="warm")


def test_under_the_daemon_a_scripts_own_output_dir_is_replaced_and_it_is_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    given = tmp_path / "job-1" / "output"
    monkeypatch.setenv("STOKER_OUTPUT_DIR", str(given))
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        sdk = stoker.init(output_dir="runs/exp1", checkpoint_every_s=3600.0)
        alone = stoker.init(output_dir=given)  # the daemon's own: nothing to say
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert sdk.output_dir == given == alone.output_dir
    said = capsys.readouterr().err
    assert said.count("stoker: under the daemon") == 1
    assert f"job.output_dir is {given}, not runs/exp1" in said


class Decoded(Numbers):
    """Numbers that say where they were decoded: the mode a worker's copy had."""

    mode = "cpu"

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.tensor([1.0 if self.mode == "device" else 0.0]), index


def test_a_new_allocation_reaches_the_callbacks_and_a_resume_the_workers(tmp_path: Path) -> None:
    router = Router(tmp_path / "agents.sock")
    try:
        sdk = job(tmp_path, STOKER_JOB_ID="job", STOKER_CONTROL=router.endpoint, STOKER_WORKERS="1")
        router.expect(Hello)
        dataset, heard = Decoded(40), []
        loader = sdk.loader(dataset, batch_size=4, shuffle=False)

        def follow(allocation: Allocation) -> None:
            heard.append(allocation)
            dataset.mode = allocation.decode_mode  # in this process; workers see it if new

        sdk.on_allocation(follow)
        on_device, indices = [], []
        for _ in sdk.epochs(1):
            for step, (where, batch) in enumerate(loader):
                on_device += where.flatten().tolist()
                indices += batch.tolist()
                if step == 0:  # same workers, another decode mode: a new DataLoader
                    router.send("job", PauseMessage(job="job", gen=1))
                    router.send(
                        "job",
                        ResumeMessage(
                            job="job", gen=1, workers_per_gpu=1, decoder_share=0.5,
                            decode_mode="device",
                        ),
                    )  # fmt: skip
                if step == 5:  # a live share: no pause, no new DataLoader
                    router.send("job", ShareMessage(job="job", gen=1, decoder_share=0.25))
                time.sleep(0.05)  # the messages arrive while the epoch is on
        assert heard == [Allocation(1, 0.5, "device"), Allocation(1, 0.25, "device")]
        assert sdk.allocation == heard[-1]
        switched = on_device.index(1.0)
        assert 0 < switched < 40 and set(on_device[switched:]) == {1.0}, on_device
        assert indices == list(range(40)), "every sample once, in order, across the resize"
        router.expect(FinishedMessage)
    finally:
        router.close()


def test_a_heartbeat_says_the_rate_of_its_interval_also_after_a_restart(tmp_path: Path) -> None:
    first = job(tmp_path)
    first.step = 1000  # as if it had trained that long before a crash
    first.checkpoint()
    router = Router(tmp_path / "agents.sock")
    try:
        again = job(
            tmp_path, STOKER_JOB_ID="j", STOKER_CONTROL=router.endpoint, STOKER_HEARTBEAT_S="0.2"
        )
        assert again.step == 1000
        for _ in again.epochs(1):
            for _ in again.loader(Numbers(60), batch_size=4, shuffle=False, num_workers=0):
                time.sleep(0.03)  # a step: 4 samples in 30 ms, about 130 a second
        beat = router.expect(HeartbeatMessage, timeout_s=10)
        assert 50 < beat.samples_per_s < 140, beat  # not this run's samples per step of all
    finally:
        router.close()


def test_a_loader_made_inside_the_epoch_loop_is_the_same_loader_each_epoch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As one may make a DataLoader each epoch: the same dataset gets its loader back, so
    each epoch has its own order and every sample once, and nothing is said."""
    sdk, data = job(tmp_path), Numbers(24)
    orders = []
    for _ in sdk.epochs(3):
        loader = sdk.loader(data, batch_size=4, shuffle=True)
        orders.append([int(i) for _, indices in loader for i in indices])
    assert all(sorted(order) == list(range(24)) for order in orders)
    assert len({tuple(order) for order in orders}) == 3, "each epoch its own order"
    assert "stoker:" not in capsys.readouterr().err


def test_other_settings_over_the_same_dataset_are_another_loader(tmp_path: Path) -> None:
    """An evaluation loader over the training set, say: its own order and position."""
    sdk, data = job(tmp_path), Numbers(8)
    train = sdk.loader(data, batch_size=4, shuffle=True)
    evaluate = sdk.loader(data, batch_size=8, shuffle=False)
    assert evaluate is not train
    assert sdk.loader(data, batch_size=4, shuffle=True) is train
    assert sdk.loader(data, batch_size=8, shuffle=False) is evaluate
    assert [int(i) for _, indices in evaluate for i in indices] == list(range(8))


def test_a_new_dataset_object_each_epoch_is_told_what_it_costs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sdk = job(tmp_path)
    for _ in sdk.epochs(3):
        for _ in sdk.loader(Numbers(8), batch_size=4):
            pass
    said = capsys.readouterr().err
    assert said.count("job.loader made a new loader") == 1, "once, not every epoch"
    assert "job.loader made a new loader in epoch 1" in said
    assert "before `for epoch in job.epochs(n)`" in said


def test_a_run_alone_starts_afresh_after_a_finished_run_and_keeps_off_another_scripts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A learning-rate sweep in one folder: the second run resumed the first's final
    # checkpoint, trained nothing, and saved the first run's model as its own.
    monkeypatch.setattr(sys, "argv", ["train.py", "--lr", "0.1"])
    first = job(tmp_path)
    first.track(model=nn.Linear(1, 1))
    first.checkpoint()  # one mid-run, then the final one
    for _ in first.epochs(1):
        pass
    monkeypatch.setattr(sys, "argv", ["train.py", "--lr", "0.001"])
    second = job(tmp_path)
    assert not second.resumed
    finished = tmp_path / "out" / "checkpoints" / "finished"
    assert "is the final checkpoint of a finished run: kept as" in capsys.readouterr().err
    assert len(list(finished.glob("checkpoint-*.pt"))) == 1, "out of the next run's way"
    assert checkpoints.checkpoint_files(finished.parent) == [], "nor an earlier one to go on from"
    second.track(model=nn.Linear(1, 1))
    for _ in range(3):
        second.checkpoint()  # interrupted before its epochs end; the newest two are kept
    assert len(list(finished.glob("checkpoint-*.pt"))) == 1, "the finished one stays"
    # Another script in the folder would load that model into its own: refused, with the fix.
    monkeypatch.setattr(sys, "argv", ["ddp_train.py"])
    with pytest.raises(RuntimeError, match=r"train.py, not of this script \(.*/ddp_train.py\)"):
        job(tmp_path)
    # The same script goes on from it, saying that its arguments were others (not which:
    # they may hold a secret, and the checkpoint keeps none).
    monkeypatch.setattr(sys, "argv", ["train.py", "--lr", "0.5"])
    assert job(tmp_path).resumed
    assert "a run of this script with other arguments)" in capsys.readouterr().err
    kept = checkpoints.read(checkpoints.latest(tmp_path / "out" / "checkpoints"))  # type: ignore[arg-type]
    assert "0.001" not in repr({key: kept[key] for key in ("script", "args")})


def test_an_evaluation_loader_left_early_starts_its_next_pass_from_its_beginning(
    tmp_path: Path,
) -> None:
    # A script evaluating 1 batch an epoch: its loader went on where it stopped, so each
    # epoch's validation covered other samples.
    sdk = job(tmp_path)
    train = sdk.loader(Numbers(8), batch_size=4, shuffle=False)
    val = sdk.loader(Numbers(12), batch_size=4, shuffle=False, evaluation=True)
    # Two datasets trained side by side: the longer one's pass, left when the shorter ends,
    # goes on at the next epoch (every sample trained), as before.
    other = sdk.loader(Numbers(12), batch_size=4, shuffle=False, seed=2)
    beside = []
    evaluated, trained = [], []
    for _ in sdk.epochs(3):
        for (_, batch), (_, more) in zip(train, other, strict=False):
            trained.append(batch.tolist())
            beside.append(more.tolist())
            if len(trained) == 3:
                break  # the training loader's left pass goes on at the next
        for _, batch in val:
            evaluated.append(batch.tolist())
            break
    assert evaluated == [[0, 1, 2, 3]] * 3, "each pass from the start, as a DataLoader's"
    assert trained[:3] == [[0, 1, 2, 3], [4, 5, 6, 7], [0, 1, 2, 3]]
    assert beside[:3] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]], "its tail trained too"
