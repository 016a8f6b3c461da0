"""The model zoo in plain torch (there is no torchvision on CPU here): ResNets with basic
blocks (custom depths 10 to 48, and 18, 34) or bottlenecks (50, 101, 152), VGGs of depth 6
to 19, and the paper's narrow variants (md = 2x, sm = 4x narrower).

Layouts come from `tpm.zoo.layout`, the same table the daemon's analytic counts use, so a
name means one network everywhere; a test checks that this module's parameter and FLOP
counts agree with `tpm.zoo.model_features`.

FLOPs per sample come from torch.utils.flop_counter.FlopCounterMode (which counts a
multiply-accumulate as two FLOPs; `measure` reports multiply-accumulates, as the paper and
the TPM count them) and are cached per (name, image size, classes) in a JSON file.
"""

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from tpm.zoo import CLASSES, Layout, layout


def build(name: str, classes: int = CLASSES) -> nn.Module:
    """A freshly initialised zoo model; UnknownModel names the accepted forms."""
    shape = layout(name)
    if shape.family == "resnet":
        return ResNet(shape, classes)
    return VGG(shape, classes)


def _conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1) -> list[nn.Module]:
    return [
        nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=kernel // 2, bias=False),
        nn.BatchNorm2d(c_out),
    ]


class _Basic(nn.Module):
    expansion = 1

    def __init__(self, c_in: int, planes: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            *_conv_bn(c_in, planes, 3, stride), nn.ReLU(inplace=True), *_conv_bn(planes, planes, 3)
        )
        self.shortcut = _shortcut(c_in, planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, c_in: int, planes: int, stride: int) -> None:
        super().__init__()
        out = planes * self.expansion
        # The stride is on the first 1x1 as in the original ResNet (v1), which is what
        # tpm.zoo counts; torchvision's v1.5 moves it to the 3x3 (4.09 G MACs, not 3.86 G).
        self.body = nn.Sequential(
            *_conv_bn(c_in, planes, 1, stride),
            nn.ReLU(inplace=True),
            *_conv_bn(planes, planes, 3),
            nn.ReLU(inplace=True),
            *_conv_bn(planes, out, 1),
        )
        self.shortcut = _shortcut(c_in, out, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


def _shortcut(c_in: int, c_out: int, stride: int) -> nn.Module:
    """Identity where shapes match, else a strided 1x1 projection (ResNet option B)."""
    if c_in == c_out and stride == 1:
        return nn.Identity()
    return nn.Sequential(*_conv_bn(c_in, c_out, 1, stride))


class _Classifier(nn.Module):
    """Convolutional `features`, then global average pooling and one linear `head`."""

    features: nn.Sequential
    head: nn.Linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1)
        logits: torch.Tensor = self.head(pooled)
        return logits


class ResNet(_Classifier):
    def __init__(self, shape: Layout, classes: int) -> None:
        super().__init__()
        block = _Bottleneck if shape.bottleneck else _Basic
        layers: list[nn.Module] = [
            *_conv_bn(3, shape.width, 7, stride=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        ]
        channels = shape.width
        for stage, blocks in enumerate(shape.stages):
            planes = shape.width * 2**stage
            for index in range(blocks):
                stride = 2 if index == 0 and stage > 0 else 1
                layers.append(block(channels, planes, stride))
                channels = planes * block.expansion
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(channels, classes)


class VGG(_Classifier):
    """Convolutions with batch norm, a max pool after each of the 5 stages, then global
    pooling and one linear layer (the head that gives the paper's VGG13 its 9.9 M)."""

    def __init__(self, shape: Layout, classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for stage, convolutions in enumerate(shape.stages):
            planes = shape.width * 2 ** min(stage, 3)
            for _ in range(convolutions):
                layers += [*_conv_bn(channels, planes, 3), nn.ReLU(inplace=True)]
                channels = planes
            layers.append(nn.MaxPool2d(2))
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(channels, classes)


@dataclass(frozen=True)
class Measured:
    """What the TPM needs of a model, counted on the real network."""

    name: str
    image_size: int
    classes: int
    flops: float  # forward multiply-accumulates per sample
    model_params: float


def measure(name: str, image_size: int = 224, classes: int = CLASSES) -> Measured:
    """Count one sample's forward pass with FlopCounterMode, and the parameters."""
    model = build(name, classes).eval()
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(torch.zeros(1, 3, image_size, image_size))
    return Measured(
        name=name,
        image_size=image_size,
        classes=classes,
        flops=counter.get_total_flops() / 2,  # FlopCounterMode: one MAC = 2 FLOPs
        model_params=float(sum(p.numel() for p in model.parameters())),
    )


def cached_measure(
    name: str, image_size: int = 224, classes: int = CLASSES, cache: Path | None = None
) -> Measured:
    """`measure`, computed once per (name, size, classes) and kept in `cache` (default
    $STOKER_CACHE or ~/.cache/stoker/model-features.json), written atomically."""
    path = (
        cache
        or Path(os.environ.get("STOKER_CACHE", Path.home() / ".cache" / "stoker"))
        / "model-features.json"
    )
    key = f"{name}@{image_size}x{classes}"
    try:
        known: dict[str, dict[str, object]] = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        known = {}
    if key in known:
        return Measured(**known[key])  # type: ignore[arg-type]
    found = measure(name, image_size, classes)
    known[key] = asdict(found)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(known, indent=1, sort_keys=True))
    temporary.replace(path)
    return found
