"""Contract tests of the decoder service: `stoker decoder serve` in a real subprocess, loaders
in real processes, real ZeroMQ, real shared memory. The device behind it is the emulator."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from agents.data import file_name, make_dataset
from fpga_driver.client import DecoderClient, Reader
from fpga_driver.device import DecoderError
from fpga_driver.pool import PREFIX
from tests.integration.decoder_harness import (
    BATCH,
    SIZE,
    endpoint,
    kill,
    loader,
    our_segments,
    serve,
    stop,
)

pytestmark = pytest.mark.timeout(120)
CAPACITY = 2000.0


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jpegs")
    make_dataset(root, images=BATCH, size=48, classes=4)
    return root


@pytest.fixture
def service(tmp_path: Path) -> Iterator[str]:
    process = serve(tmp_path, CAPACITY)
    yield endpoint(tmp_path)
    stop(process)
    assert process.returncode == 0


def served(stats: dict[str, object], job: str) -> int:
    clients = stats["clients"]
    assert isinstance(clients, dict)
    return int(clients[job]["served"])


def paths(images: Path, count: int = BATCH) -> list[Path]:
    return [images / file_name(index) for index in range(count)]


def test_each_job_gets_its_share_over_ten_seconds(service: str, images: Path) -> None:
    loaders = [loader(service, job, share, images) for job, share in (("a", 0.25), ("b", 0.75))]
    try:
        for process in loaders:
            assert process.stdout is not None and process.stdout.readline()
        with DecoderClient(service, "observer", 0.01, max_batch=1, size=SIZE) as observer:
            time.sleep(1.0)  # every image decoded once; the queues full
            before, started = observer.stats(), time.monotonic()
            time.sleep(10.0)
            after, elapsed = observer.stats(), time.monotonic() - started
        rates = {job: (served(after, job) - served(before, job)) / elapsed for job in "ab"}
    finally:
        for process in loaders:
            kill(process)
    assert rates["a"] == pytest.approx(0.25 * CAPACITY, rel=0.05), rates
    assert rates["b"] == pytest.approx(0.75 * CAPACITY, rel=0.05), rates
    assert "EMULATED" in str(after["device"])


def test_a_tiny_share_is_still_served_and_a_share_changes_live(service: str, images: Path) -> None:
    big = loader(service, "big", 0.98, images)
    try:
        assert big.stdout is not None and big.stdout.readline()
        with DecoderClient(service, "tiny", 0.02, max_batch=BATCH, size=SIZE) as tiny:
            started = time.monotonic()
            for batch in Reader(tiny, (paths(images) for _ in range(4)), depth=2):
                batch.release()
            slow = time.monotonic() - started
            tiny.set_share(0.5)
            started = time.monotonic()
            for batch in Reader(tiny, (paths(images) for _ in range(4)), depth=2):
                batch.release()
            fast = time.monotonic() - started
    finally:
        kill(big)
    # 64 samples at 2 % of 2,000/s take about 1.6 s; at half, about 0.06 s.
    assert slow < 5.0
    assert fast < slow / 4, (slow, fast)


def test_device_pixels_equal_pillows_decode(service: str, images: Path) -> None:
    with DecoderClient(service, "check", 0.5, max_batch=BATCH, size=SIZE) as client:
        pixels = client.decode(paths(images, 4))
    for index, got in enumerate(pixels):
        with Image.open(images / file_name(index)) as image:
            want = np.asarray(image.convert("RGB").resize((SIZE, SIZE)))
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


def test_a_corrupt_jpeg_and_an_unknown_client_get_errors_and_others_are_served(
    service: str, images: Path, tmp_path: Path
) -> None:
    corrupt = tmp_path / "corrupt.jpg"
    corrupt.write_bytes(b"\xff\xd8\xff not a jpeg at all")
    with DecoderClient(service, "good", 0.5, max_batch=BATCH, size=SIZE) as good:
        with DecoderClient(service, "bad", 0.5, max_batch=BATCH, size=SIZE) as bad:
            with pytest.raises(DecoderError, match=r"corrupt\.jpg"):
                bad.decode([corrupt])
            assert bad.decode(paths(images, 2)).shape == (2, SIZE, SIZE, 3)  # block came back
        assert good.decode(paths(images)).shape == (BATCH, SIZE, SIZE, 3)
    import zmq  # noqa: PLC0415 (a raw socket: a client that never registered)

    context = zmq.Context()
    stranger = context.socket(zmq.DEALER)
    stranger.connect(service)
    stranger.send(b'{"type": "decode", "block": 0, "paths": ["x.jpg"], "size": 32}')
    assert stranger.poll(5000)
    assert b"unknown client" in stranger.recv()
    stranger.send(b'{"type": "decode", "block": 0, "bogus": 1}')
    assert stranger.poll(5000)
    assert b"malformed" in stranger.recv()
    stranger.close(0)
    context.term()


def test_a_loader_killed_with_sigkill_leaks_no_block(service: str, images: Path) -> None:
    before = our_segments()
    doomed = loader(service, "doomed", 0.5, images)
    assert doomed.stdout is not None
    blocks = set(doomed.stdout.readline().split())
    assert len(blocks) == 4 and all(name.startswith(PREFIX) for name in blocks)
    assert blocks <= our_segments()
    time.sleep(0.3)  # commands in flight, blocks full
    os.kill(doomed.pid, signal.SIGKILL)
    kill(doomed)
    deadline = time.monotonic() + 5
    while our_segments() & blocks and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not our_segments() & blocks, "the dead loader's blocks are still in /dev/shm"
    assert our_segments() <= before | blocks
    with DecoderClient(service, "survivor", 0.5, max_batch=BATCH, size=SIZE) as survivor:
        assert survivor.decode(paths(images, 2)).shape == (2, SIZE, SIZE, 3)


def test_stopping_the_service_unlinks_every_block(tmp_path: Path, images: Path) -> None:
    process = serve(tmp_path, CAPACITY)
    client = DecoderClient(endpoint(tmp_path), "left", 0.5, max_batch=BATCH, size=SIZE)
    names = {block.name for block in client.blocks.blocks}
    assert names <= our_segments()
    stop(process)
    assert process.returncode == 0
    assert not names & our_segments()
    client.close()  # our mappings and socket; the files are gone already


def test_no_service_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DecoderError, match="stoker decoder serve"):
        DecoderClient(endpoint(tmp_path), "j", 0.5, max_batch=1, size=8, timeout_s=0.5)


def test_serve_refuses_a_bad_capacity(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "daemon.cli",
            "decoder",
            "serve",
            "--state-dir",
            str(tmp_path),
            "--capacity",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2
    assert "capacity" in run.stderr
