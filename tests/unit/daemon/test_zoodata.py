"""A zoo job is planned at the size of the images its trainer feeds the model: the
config's `training.image_size`, else its dataset's own (the index `stoker dataset make`
writes), else ImageNet's 224; its FLOPs follow."""

import json
from pathlib import Path

import pytest

from daemon.jobspec import JobSettings
from daemon.zoodata import IMAGENET_SIZE, zoo_image_size
from tpm.zoo import model_features


def test_the_image_size_is_the_configs_else_the_datasets_else_imagenets(tmp_path: Path) -> None:
    (tmp_path / "index.json").write_text(json.dumps({"images": 8, "size": 32, "classes": 2}))
    assert zoo_image_size(None, tmp_path) == 32
    assert zoo_image_size(None, str(tmp_path)) == 32
    assert zoo_image_size(64, tmp_path) == 64, "the trainer crops to the configured size"
    assert zoo_image_size(None, tmp_path / "gone") == IMAGENET_SIZE == 224
    assert zoo_image_size(None, None) == 224


def test_a_zoo_jobs_flops_are_counted_at_its_image_size() -> None:
    settings = JobSettings.from_spec(
        {"model": "smResnet20", "iterations": 10, "batch_size": 8, "gpus": 1}
    )
    small = settings.request("j", default_max_restarts=3, restarts=0, image_size=32)
    large = settings.request("j", default_max_restarts=3, restarts=0)
    assert small.flops == model_features("smResnet20", 32).flops
    assert large.flops == model_features("smResnet20").flops
    assert large.flops / small.flops == pytest.approx((224 / 32) ** 2, rel=0.1)
