"""The torch zoo is the network the TPM's analytic counts describe, and it trains."""

import json
from pathlib import Path

import pytest
import torch

from agents.models import build, cached_measure, measure
from tpm.errors import UnknownModel
from tpm.zoo import model_features

NAMES = [
    "Resnet18", "mdResnet12", "smResnet20", "Resnet28", "Resnet50",
    "VGG7", "VGG13", "smVGG7", "mdVGG13",
]  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_counted_on_the_network_as_the_tpm_counts_it(name: str) -> None:
    measured, analytic = measure(name), model_features(name)
    assert measured.model_params == analytic.model_params
    assert measured.flops == pytest.approx(analytic.flops, rel=1e-9)
    for size in (32, 48, 64):  # what the zoo trainer feeds from a small dataset
        small = model_features(name, image_size=size).flops
        assert measure(name, image_size=size).flops == pytest.approx(small, rel=1e-9), size


def test_the_papers_figures() -> None:
    assert measure("Resnet18").model_params == pytest.approx(11.7e6, rel=0.01)  # Sec. II-D
    assert measure("mdResnet12").model_params == pytest.approx(1.8e6, rel=0.02)
    assert measure("VGG13").model_params == pytest.approx(9.9e6, rel=0.01)  # Table III


@pytest.mark.parametrize("name", ["smResnet20", "smVGG7", "smResnet50"])
def test_small_images_train(name: str) -> None:
    torch.manual_seed(0)
    model = build(name, classes=10)
    images, labels = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
    optimiser = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(5):
        optimiser.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()  # type: ignore[no-untyped-call]
        optimiser.step()
        losses.append(loss.item())
    assert model(images).shape == (4, 10)
    assert losses[-1] < losses[0]


def test_unknown_names_are_refused() -> None:
    with pytest.raises(UnknownModel):
        build("AlexNet")
    with pytest.raises(UnknownModel):
        build("Resnet19")


def test_measurements_are_cached_in_a_file(tmp_path: Path) -> None:
    cache = tmp_path / "features.json"
    first = cached_measure("smVGG7", image_size=64, classes=10, cache=cache)
    stored = json.loads(cache.read_text())
    assert stored["smVGG7@64x10"]["flops"] == first.flops
    stored["smVGG7@64x10"]["flops"] = 123.0  # a later call reads the file, not the model
    cache.write_text(json.dumps(stored))
    assert cached_measure("smVGG7", image_size=64, classes=10, cache=cache).flops == 123.0
