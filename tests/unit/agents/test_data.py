"""Real JPEGs on disk, a cheap-to-pickle dataset, and an epoch order that counts every
sample once however often the job pauses."""

import json
import pickle
import time
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from torch.utils.data import DataLoader

from agents.data import EpochOrder, JpegDataset
from agents.datafiles import DataError, file_name, make_dataset


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("images")
    make_dataset(root, images=48, size=48, classes=4, seed=1)
    return root


def test_the_folder_holds_real_jpegs_and_an_index(folder: Path) -> None:
    with Image.open(folder / file_name(0)) as image:
        assert image.format == "JPEG" and image.size == (48, 48)
    dataset = JpegDataset(folder, image_size=32)
    assert len(dataset) == 48 and set(dataset.labels.tolist()) <= {0, 1, 2, 3}
    tensor, label = dataset[5]
    assert tensor.shape == (3, 32, 32) and tensor.dtype == torch.float32
    assert label == int(dataset.labels[5])
    assert -3.0 < float(tensor.mean()) < 3.0  # normalised
    assert JpegDataset(folder)[5][0].shape == (3, 48, 48), "no size given: the images' own"


def test_pickles_small_whatever_the_number_of_images(folder: Path) -> None:
    dataset = JpegDataset(folder, image_size=32)
    assert len(pickle.dumps(dataset)) < 1000 + 2 * len(dataset)


def test_a_sample_looks_the_same_wherever_it_is_decoded_in_an_epoch(folder: Path) -> None:
    dataset = JpegDataset(folder, image_size=32, seed=7)
    again = pickle.loads(pickle.dumps(dataset))  # as a worker sees it
    assert torch.equal(dataset[3][0], again[3][0])
    dataset.epoch = 1
    assert not torch.equal(dataset[3][0], again[3][0])  # a new epoch, a new crop


def test_persistent_workers_see_each_epoch_the_script_sets(folder: Path) -> None:
    dataset = JpegDataset(folder, image_size=32)
    loader = DataLoader(dataset, batch_size=8, num_workers=1, persistent_workers=True)
    firsts = []
    for epoch in range(2):
        dataset.epoch = epoch  # in the main process, after its worker started
        batches = [pixels for pixels, _ in loader]  # the whole epoch, as training goes
        firsts.append(batches[0][0])
    fresh = JpegDataset(folder, image_size=32)
    for epoch, first in enumerate(firsts):
        fresh.epoch = epoch
        assert torch.equal(first, fresh[0][0]), f"epoch {epoch}'s draws"
    assert not torch.equal(firsts[0], firsts[1]), "a new epoch, new augmentation draws"


def test_a_remote_store_waits_before_every_read_and_says_it_is_emulated(tmp_path: Path) -> None:
    make_dataset(tmp_path, images=8, size=16, classes=2, read_latency_s=0.05)
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["read_latency_s"] == 0.05 and "remote store" in index["emulated"]
    remote, local = JpegDataset(tmp_path), JpegDataset(tmp_path)
    local.read_latency_s = 0.0  # the same files, read as a local folder
    assert torch.equal(remote[3][0], local[3][0]), "the wait changes no pixel"
    started = time.perf_counter()
    for position in range(4):
        remote[position]
    assert time.perf_counter() - started >= 4 * 0.05, "each read waited its 50 ms"
    worker = pickle.loads(pickle.dumps(remote))  # as a DataLoader worker gets it
    assert worker.read_latency_s == 0.05
    with pytest.raises(DataError, match="--read-latency-ms must be 0 to 10000 ms, got -5"):
        make_dataset(tmp_path / "bad", images=1, size=16, read_latency_s=-0.005)
    index["read_latency_s"] = -1  # an index edited by hand
    (tmp_path / "index.json").write_text(json.dumps(index))
    with pytest.raises(DataError, match="read_latency_s must be 0 to 10 s, got -1"):
        JpegDataset(tmp_path)


def test_a_local_folder_does_not_wait(folder: Path) -> None:
    assert "read_latency_s" not in json.loads((folder / "index.json").read_text())
    assert JpegDataset(folder).read_latency_s == 0.0


def test_missing_index_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="stoker dataset make"):
        JpegDataset(tmp_path, image_size=32)
    with pytest.raises(DataError, match="--size"):
        make_dataset(tmp_path, images=1, size=8)


@settings(max_examples=200, deadline=None)
@given(
    samples=st.integers(1, 200),
    batch=st.integers(1, 40),
    world=st.sampled_from([1, 2, 4]),
    pauses=st.lists(st.integers(0, 12), max_size=6),
)
def test_every_sample_of_an_epoch_counts_once_across_pauses(
    samples: int, batch: int, world: int, pauses: list[int]
) -> None:
    order, consumed = EpochOrder(samples, seed=3), []
    for run in [*pauses, samples]:  # each run trains some global batches, then pauses
        for _ in range(run):
            if order.epoch:
                break
            # A fresh iterator per step, as a loader rebuilt after a pause starts one.
            step = [i for rank in range(world) for i in next(order.batches(rank, world, batch))]
            consumed += step
            order.advance(len(step))
    assert sorted(consumed) == list(range(samples))
    assert order.epoch == 1 and order.cursor == 0


@settings(max_examples=200, deadline=None)
@given(samples=st.integers(4, 300), batch=st.integers(4, 64), world=st.sampled_from([2, 3, 4]))
def test_every_rank_has_a_sample_in_every_step(samples: int, batch: int, world: int) -> None:
    order = EpochOrder(samples, seed=1)
    shares = [list(order.batches(rank, world, batch)) for rank in range(world)]
    assert len({len(rank_shares) for rank_shares in shares}) == 1, "the same number of steps"
    for step in zip(*shares, strict=True):
        assert all(step) and max(map(len, step)) - min(map(len, step)) <= 1


@settings(max_examples=300, deadline=None)
@given(
    samples=st.integers(1, 300),
    batch=st.integers(1, 64),
    world=st.sampled_from([1, 2, 3, 4]),
    cursor=st.integers(0, 300),
    drop_last=st.booleans(),
)
def test_the_batches_are_counted_as_many_as_are_made(
    samples: int, batch: int, world: int, cursor: int, drop_last: bool
) -> None:
    order = EpochOrder(samples, seed=2, cursor=min(cursor, samples))
    made = order.global_batches(batch, world)
    if drop_last and made and len(made[-1]) < batch:  # as the job's loader drops it
        made.pop()
    assert order.batch_count(batch, world, drop_last) == len(made)


def test_a_loader_with_any_worker_count_yields_the_same_batches(folder: Path) -> None:
    dataset = JpegDataset(folder, image_size=32)
    order = EpochOrder(len(dataset), seed=5, cursor=8)
    labels = []
    for workers in (0, 2):
        loader = DataLoader(
            dataset, batch_sampler=list(order.batches(0, 1, 8)), num_workers=workers
        )
        labels.append(torch.cat([batch_labels for _, batch_labels in loader]).tolist())
    assert labels[0] == labels[1] and len(labels[0]) == 40
