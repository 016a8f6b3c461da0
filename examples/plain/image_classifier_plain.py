"""An image classifier on a folder of JPEG files: a small CNN, Pillow to decode, plain
torch everywhere else. The folder is the one `stoker dataset make` writes
(JPEGs and index.json with their labels) or an ImageFolder one (a sub-folder per class).

    stoker dataset make data --images 512 --size 32
    python examples/image_classifier.py data --epochs 2      # alone: ./stoker-out
    stoker submit examples/image_classifier.toml             # under the daemon

docs/sdk.md shows this file against its plain-PyTorch version, examples/plain/.
"""

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset


class JpegFolder(Dataset[tuple[torch.Tensor, int]]):
    """(image, label) pairs: labels from index.json, or from ImageFolder's class folders."""

    def __init__(self, root: Path, size: int) -> None:
        self.size = size
        index = root / "index.json"
        if index.is_file():
            labels = json.loads(index.read_text())["labels"]
            self.items = [(root / f"{i:08d}.jpg", int(label)) for i, label in enumerate(labels)]
        else:
            classes = sorted(path.name for path in root.iterdir() if path.is_dir())
            self.items = [
                (image, label)
                for label, name in enumerate(classes)
                for image in sorted((root / name).glob("*.jpg"))
            ]
        if not self.items:
            raise SystemExit(f"{root}: no JPEG files; make some with `stoker dataset make`")

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.items[index]
        with Image.open(path) as image:
            pixels = np.array(image.convert("RGB").resize((self.size, self.size)))
        return torch.from_numpy(pixels).permute(2, 0, 1).float() / 255.0, label


def network(classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(32, classes),
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dataset = JpegFolder(args.data, args.size)
    model = network(classes=max(label for _, label in dataset.items) + 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(
        dataset, batch_size=args.batch_size, shuffle=True, num_workers=2, persistent_workers=True
    )
    for epoch in range(args.epochs):
        for images, labels in loader:
            logits = model(images.to(device))
            loss = nn.functional.cross_entropy(logits, labels.to(device))
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
