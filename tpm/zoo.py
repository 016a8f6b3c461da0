"""The model zoo by name, with the features the TPM needs: forward FLOPs per sample and
parameters, counted analytically for 1,000 classes and square inputs of a given size
(224 x 224, ImageNet's, unless told: a job on 32-pixel images does a fiftieth of the work).

Names follow the paper (Sec. IV-A): `Resnet18`, `Resnet28`, `VGG13`, `VGG7`, and the 2x and
4x narrower variants `mdResnet12`, `smResnet20`, `mdVGG13`, `smVGG7`. "FLOPs" are
multiply-accumulates, as the paper and torchvision count them (ResNet-18: 1.8 G, 11.7 M
parameters). Custom ResNet depths 10 to 48 use basic blocks (depth = 2 + 2 x blocks); 50,
101 and 152 use bottlenecks. VGG depth counts its convolutions plus one classifier layer, and
the classifier is global pooling then one linear layer (the paper's VGG13 has 9.9 M
parameters, which only such a head gives).
"""

import re
from dataclasses import dataclass
from functools import cache

from tpm.errors import UnknownModel

CLASSES = 1000
_NAME = re.compile(r"^(?P<width>sm|md)?(?P<family>resnet|vgg)(?P<depth>\d+)$", re.IGNORECASE)
_NARROWING = {None: 1, "md": 2, "sm": 4}

# Blocks per stage where the depth has a standard layout.
_RESNET_STAGES = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}
_RESNET_STAGES[152] = (3, 8, 36, 3)
_BOTTLENECK_DEPTHS = (50, 101, 152)
# Custom depths grow from one block per stage, adding to stages in this order (stage 3 first,
# where ResNet-34 puts most of its blocks).
_GROWTH_ORDER = (2, 1, 0, 3)
_VGG_STAGES = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3), 19: (2, 2, 4, 4, 4)}


@dataclass(frozen=True)
class ModelFeatures:
    """What the TPM's training-rate formula needs of a model."""

    name: str
    flops: float  # forward multiply-accumulates per sample
    model_params: float


@dataclass
class _Counter:
    flops: float = 0.0
    params: float = 0.0

    def conv(self, c_in: int, c_out: int, kernel: int, out_size: int) -> None:
        """A bias-free convolution followed by batch norm (2 parameters per channel)."""
        weights = c_in * c_out * kernel * kernel
        self.params += weights + 2 * c_out
        self.flops += weights * out_size * out_size

    def linear(self, c_in: int, c_out: int) -> None:
        self.params += c_in * c_out + c_out
        self.flops += c_in * c_out


@dataclass(frozen=True)
class Layout:
    """What a zoo name means: the family, its depth, and the first stage's width (64 for
    the standard models, 32 for md, 16 for sm). The torch models (agents/models.py) and the
    analytic counts here are both built from it."""

    family: str  # "resnet" or "vgg"
    depth: int
    width: int

    @property
    def stages(self) -> tuple[int, ...]:
        """Blocks (ResNet) or convolutions (VGG) per stage."""
        return resnet_stages(self.depth) if self.family == "resnet" else vgg_stages(self.depth)

    @property
    def bottleneck(self) -> bool:
        return self.family == "resnet" and self.depth in _BOTTLENECK_DEPTHS


def layout(name: str) -> Layout:
    """The layout of a zoo name; UnknownModel names the accepted forms."""
    match = _NAME.match(name.strip())
    if match is None:
        raise UnknownModel(
            f"unknown model {name!r}; use [sm|md]ResnetN or [sm|md]VGGN, e.g. Resnet18, "
            "mdResnet12, smVGG7",
        )
    narrowing = _NARROWING[match["width"].lower() if match["width"] else None]
    found = Layout(match["family"].lower(), int(match["depth"]), 64 // narrowing)
    _ = found.stages  # raises UnknownModel for a depth the family does not have
    return found


@cache
def model_features(name: str, image_size: int = 224) -> ModelFeatures:
    """FLOPs and parameters of a zoo model on `image_size`-pixel inputs; UnknownModel
    names the accepted forms."""
    shape = layout(name)
    counter = _Counter()
    if shape.family == "resnet":
        _count_resnet(counter, shape.depth, shape.width, image_size)
    else:
        _count_vgg(counter, shape.depth, shape.width, image_size)
    return ModelFeatures(name=name, flops=counter.flops, model_params=counter.params)


def resnet_stages(depth: int) -> tuple[int, ...]:
    """Blocks per stage of a ResNet of this depth (basic blocks below 50)."""
    if depth in _RESNET_STAGES:
        return _RESNET_STAGES[depth]
    if depth >= 50 or depth < 10 or depth % 2:
        raise UnknownModel(
            f"ResNet depth {depth} is not available; use an even depth from 10 to 48 "
            "or one of 50, 101, 152",
        )
    stages = [1, 1, 1, 1]
    for extra in range((depth - 2) // 2 - 4):
        stages[_GROWTH_ORDER[extra % 4]] += 1
    return tuple(stages)


def vgg_stages(depth: int) -> tuple[int, ...]:
    """Convolutions per stage of a VGG of this depth (convolutions + 1 classifier layer)."""
    if depth in _VGG_STAGES:
        return _VGG_STAGES[depth]
    convolutions = depth - 1
    if not 5 <= convolutions <= 18:
        raise UnknownModel(f"VGG depth {depth} is not available; use a depth from 6 to 19")
    stages = [1, 1, 1, 1, 1]
    for extra in range(convolutions - 5):
        stages[4 - extra % 3] += 1  # deep stages first, as VGG-16 and VGG-19 grow
    return tuple(stages)


def _halved(size: int) -> int:
    """The side after a stride-2 convolution or pooling padded to keep its centre (7x7
    pad 3, 3x3 pad 1): 224 -> 112, 7 -> 4."""
    return (size + 1) // 2


def _count_resnet(counter: _Counter, depth: int, width: int, image_size: int) -> None:
    stages = resnet_stages(depth)
    bottleneck = depth in _BOTTLENECK_DEPTHS
    expansion = 4 if bottleneck else 1
    stem = _halved(image_size)
    counter.conv(3, width, 7, stem)  # stem, then max pooling (224: 112, then 56)
    channels, size = width, _halved(stem)
    for stage, blocks in enumerate(stages):
        planes = width * 2**stage
        for block in range(blocks):
            if block == 0 and stage > 0:
                size = _halved(size)
            out = planes * expansion
            if bottleneck:
                counter.conv(channels, planes, 1, size)
                counter.conv(planes, planes, 3, size)
                counter.conv(planes, out, 1, size)
            else:
                counter.conv(channels, planes, 3, size)
                counter.conv(planes, planes, 3, size)
            if channels != out or (block == 0 and stage > 0):
                counter.conv(channels, out, 1, size)  # projection shortcut
            channels = out
    counter.linear(channels, CLASSES)


def _count_vgg(counter: _Counter, depth: int, width: int, image_size: int) -> None:
    channels, size = 3, image_size
    for stage, convolutions in enumerate(vgg_stages(depth)):
        planes = width * 2 ** min(stage, 3)
        for _ in range(convolutions):
            counter.conv(channels, planes, 3, size)
            channels = planes
        size //= 2
    counter.linear(channels, CLASSES)
