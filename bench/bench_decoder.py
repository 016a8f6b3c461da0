"""The decoder service under load: what each job is served and what the emulator costs the
host (issue 6: within 5 % of share; under 0.2 core per 1,000 samples/s served).

For each capacity and output size, `fpga_driver.measure.measure_saturated`: `stoker decoder
serve` in a subprocess, two loader processes (`python -m fpga_driver.loadgen`, shares 0.25
and 0.75) saturating it, and the samples each was served and the CPU time of the service
process over `--seconds`.

Run: .venv/bin/python -m bench.bench_decoder [--seconds S]
Prints a table and saves bench/out/decoder.json.
"""

import argparse
import tempfile
from pathlib import Path

from agents.datafiles import make_dataset
from bench.common import save
from fpga_driver.measure import measure_saturated

SHARES = {"a": 0.25, "b": 0.75}
CAPACITIES = (1000.0, 2000.0, 4000.0)
SIZES = (32, 224)  # output side: a CIFAR-like and an ImageNet-like batch to copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="stoker-bench-decoder-") as scratch:
        images = Path(scratch) / "images"
        make_dataset(images, images=16, size=64)
        for size in SIZES:
            for capacity in CAPACITIES:
                load = measure_saturated(capacity, SHARES, args.seconds, images, size=size)
                rows.append({"size": size, **load.contract(capacity, SHARES)})
                shares = "  ".join(
                    f"share {share:.2f}: {load.served_per_s[job]:7.1f}/s "
                    f"({load.served_per_s[job] / (share * capacity) - 1:+.1%})"
                    for job, share in SHARES.items()
                )
                print(
                    f"capacity {capacity:6.0f}/s, {size:3d} px: {shares}  service CPU "
                    f"{load.service_cpu_s:.2f} s = {load.cores_per_1000_samples_per_s:.3f} "
                    "cores per 1,000 samples/s"
                )
    path = save("decoder", {"goal": "within 5 % of share; < 0.2 core per 1000/s", "rows": rows})
    print(f"saved {path}")


if __name__ == "__main__":
    main()
