"""A user's script on the stoker SDK: a tiny regression on its own dataset. Each trained
sample's index goes to <output>/seen.txt, so a test can count every sample of every epoch.
Arguments: EPOCHS SLEEP_S_PER_STEP [SLEEP_S_PER_SAMPLE (in the loader workers) [SAMPLES
[CRASH_AT_STEP (raise there, as a script with a bug does) [CRASH_IN: step (default), or
epoch-end (raise in the script's own end of the epoch that step is in)]]]]. With EVAL_S in
its environment, it sleeps that long after reporting its final loss (saving a model, say).
With OWN_LOOP, it counts its epochs itself (`range`), as a script new to the SDK may. With
SAVE_FAILS, its save after training raises, as a full disk would."""

import os
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset

import stoker


class Points(Dataset[tuple[torch.Tensor, torch.Tensor, int]]):
    def __init__(self, load_s: float, samples: int) -> None:
        self.load_s, self.samples = load_s, samples

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        time.sleep(self.load_s)
        x = torch.tensor([index / self.samples])
        return x, 3 * x + 1, index


def main() -> None:
    epochs, pause_s = int(sys.argv[1]), float(sys.argv[2])
    load_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    samples = int(sys.argv[4]) if len(sys.argv) > 4 else 96
    crash_at = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    crash_in = sys.argv[6] if len(sys.argv) > 6 else "step"
    job = stoker.init()
    if crash_at:
        print(f"a bug waits at step {crash_at}", flush=True)  # both logs hold output
    model = nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    loader = job.loader(Points(load_s, samples), batch_size=8, shuffle=True, num_workers=2)
    job.track(model=model, optimizer=optimizer)
    seen = Path(job.output_dir) / "seen.txt"
    for epoch in range(epochs) if os.environ.get("OWN_LOOP") else job.epochs(epochs):
        for x, y, indices in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            job.report(loss=loss)
            if job.step == crash_at and crash_in == "step":
                raise RuntimeError(f"a bug at step {job.step}")
            with seen.open("a") as out:
                out.write("".join(f"{epoch} {i}\n" for i in indices.tolist()))
            time.sleep(pause_s)
        if crash_in == "epoch-end" and job.step >= crash_at:
            raise RuntimeError(f"a bug at the end of epoch {epoch}")
    with torch.no_grad():  # an evaluation after training, reported as scripts do
        x = torch.arange(samples, dtype=torch.float32).unsqueeze(1) / samples
        job.report(final_loss=nn.functional.mse_loss(model(x), 3 * x + 1))
    eval_s = float(os.environ.get("EVAL_S", "0"))
    if eval_s:
        print(f"saving for {eval_s:g} s", flush=True)
        time.sleep(eval_s)
    if os.environ.get("SAVE_FAILS"):
        raise OSError(28, "No space left on device", str(job.output_dir / "model.pt"))
    print(f"done: weight {model.weight.item():.2f}, resumed {job.resumed}")


if __name__ == "__main__":
    main()
