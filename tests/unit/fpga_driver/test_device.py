"""Contract tests of a decoder device, run against the emulator (the only device here)."""

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from agents.datafiles import file_name, make_dataset
from fpga_driver.device import (
    DecodeCommand,
    DecoderError,
    EmulatedDevice,
    saturate,
    served_per_s,
)

CAPACITY = 4000.0  # samples/s
BATCH = 16


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("jpegs")
    make_dataset(root, images=64, size=48, classes=4)
    return [root / file_name(i) for i in range(64)]


@pytest.fixture
def device() -> Iterator[EmulatedDevice]:
    emulator = EmulatedDevice(CAPACITY, latency_s=0.002, units=4)
    yield emulator
    emulator.close()


def keep_busy(
    device: EmulatedDevice, client: str, images: list[Path], stop: threading.Event
) -> None:
    saturate(device, client, images[:BATCH], 32, stop)


def test_each_client_gets_its_share_under_saturation(
    device: EmulatedDevice, images: list[Path]
) -> None:
    shares = {"a": 0.25, "b": 0.75}
    for client, share in shares.items():
        device.register(client, share)
    stop = threading.Event()
    for client in shares:
        keep_busy(device, client, images, stop)
    rates = served_per_s(device, list(shares), seconds=3.0)
    stop.set()
    for client, share in shares.items():
        assert rates[client] == pytest.approx(share * CAPACITY, rel=0.05), rates


def test_a_tiny_share_is_still_served_and_a_new_share_applies_live(
    device: EmulatedDevice, images: list[Path]
) -> None:
    device.register("big", 0.99)
    device.register("tiny", 0.01)
    stop = threading.Event()
    keep_busy(device, "big", images, stop)
    keep_busy(device, "tiny", images, stop)
    first = served_per_s(device, ["big", "tiny"], seconds=1.5)
    assert first["tiny"] > 0, "no starvation"
    device.set_share("tiny", 0.5)
    device.set_share("big", 0.5)
    second = served_per_s(device, ["big", "tiny"], seconds=1.5)
    stop.set()
    assert second["tiny"] == pytest.approx(second["big"], rel=0.10), second


def test_the_output_is_pillows_decode(device: EmulatedDevice, images: list[Path]) -> None:
    device.register("a", 1.0)
    pixels = device.submit(DecodeCommand("a", tuple(images[:3]), 32)).result(timeout=5)
    assert pixels.shape == (3, 32, 32, 3) and pixels.dtype == np.uint8
    with Image.open(images[1]) as image:
        expected = np.asarray(image.convert("RGB").resize((32, 32)))
    assert np.abs(pixels[1].astype(int) - expected.astype(int)).max() <= 1


def test_bad_input_fails_its_command_and_the_device_serves_on(
    device: EmulatedDevice, images: list[Path], tmp_path: Path
) -> None:
    corrupt = tmp_path / "corrupt.jpg"
    corrupt.write_bytes(b"\xff\xd8 not really a jpeg")
    device.register("a", 1.0)
    with pytest.raises(DecoderError, match=r"corrupt\.jpg"):
        device.submit(DecodeCommand("a", (corrupt,), 32)).result(timeout=5)
    with pytest.raises(DecoderError, match="unknown client"):
        device.submit(DecodeCommand("stranger", tuple(images[:1]), 32))
    assert device.submit(DecodeCommand("a", tuple(images[:2]), 32)).result(timeout=5).shape[0] == 2
    with pytest.raises(DecoderError, match="share"):
        device.register("b", 1.5)


def test_it_says_it_is_an_emulator_and_decodes_each_image_once(
    device: EmulatedDevice, images: list[Path]
) -> None:
    device.register("a", 1.0)
    for _ in range(5):
        device.submit(DecodeCommand("a", tuple(images[:8]), 32)).result(timeout=5)
    stats = device.stats()
    assert "EMULATED" in str(stats["device"])
    assert stats["distinct_images"] == 8
