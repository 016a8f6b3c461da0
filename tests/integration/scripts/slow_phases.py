"""A user's script that takes its time where real scripts do: SETUP_S seconds after
`stoker.init()` before its first batch (tokenising, building a model), and an evaluation
pass at each epoch's end whose batches take EVAL_S seconds in all. Argument: EPOCHS."""

import os
import sys
import time

import torch
from torch import nn
from torch.utils.data import TensorDataset

import stoker


def main() -> None:
    epochs = int(sys.argv[1])
    setup_s, eval_s = float(os.environ["SETUP_S"]), float(os.environ["EVAL_S"])
    job = stoker.init()
    time.sleep(setup_s)  # the script's own setup: no batch, no heartbeat of training
    points = torch.linspace(0, 1, 64).unsqueeze(1)
    train = job.loader(TensorDataset(points, 3 * points + 1), batch_size=8)
    held_out = job.loader(TensorDataset(points[:4], 3 * points[:4] + 1), batch_size=1,
                          shuffle=False, evaluation=True)  # fmt: skip
    model = nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    job.track(model=model, optimizer=optimizer)
    for _ in job.epochs(epochs):
        for x, y in train:
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            job.report(loss=loss)
        with torch.no_grad():
            for x, y in held_out:
                time.sleep(eval_s / 4)  # a slow evaluation, batch by batch
                job.report(val_loss=nn.functional.mse_loss(model(x), y))
    print(f"done at step {job.step}", flush=True)


if __name__ == "__main__":
    main()
