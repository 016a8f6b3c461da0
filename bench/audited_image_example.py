"""examples/image_classifier.py as it is, with an audit of every batch it trains, for
bench/bench_sdk_resize.py.

Run: python -m bench.audited_image_example --audit FILE DATA [the example's options]

The SDK's loader builds a torch DataLoader over its batches of sample indices (one per
epoch, and one more after each resize); here that DataLoader is a subclass that writes,
for each batch it hands to the script, a line `MONOTONIC_S INDEX INDEX ...` to FILE, after
checking that the labels in the batch are those of the indices (so the indices are the
samples trained, not only the ones asked for). Nothing else of the example changes.
"""

import argparse
import importlib.util
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from torch.utils.data import DataLoader

import agents.loader

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "image_classifier.py"


def audited(audit: TextIO) -> type[DataLoader[Any]]:
    """A DataLoader that writes each batch's indices and hand-out time to `audit`."""

    class AuditedDataLoader(DataLoader[Any]):
        def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
            items = self.dataset.items  # type: ignore[attr-defined]  # JpegFolder's
            shares = self.batch_sampler
            assert isinstance(shares, list), "the SDK's loader gives its batches as a list"
            for share, batch in zip(shares, super().__iter__(), strict=False):
                labels = [items[index][1] for index in share]
                if batch[1].tolist() != labels:
                    raise AssertionError(f"a batch's labels are not those of {share}")
                audit.write(f"{time.monotonic():.6f} {' '.join(map(str, share))}\n")
                audit.flush()
                yield batch

    return AuditedDataLoader


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--audit", type=Path, required=True, help="where the lines go")
    args, rest = parser.parse_known_args()
    spec = importlib.util.spec_from_file_location("image_classifier", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    with args.audit.open("a") as audit:
        agents.loader.DataLoader = audited(audit)  # type: ignore[attr-defined]
        sys.argv = [str(EXAMPLE), *rest]
        example.main()


if __name__ == "__main__":
    main()
