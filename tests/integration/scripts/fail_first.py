"""A user's script that fails on its first batch, as a bug would, after a line on stdout
(with $NOTE, when its submission set it)."""

import os

import torch
from torch.utils.data import TensorDataset

import stoker

job = stoker.init()
print(f"starting; note: {os.environ.get('NOTE')}", flush=True)
loader = job.loader(TensorDataset(torch.zeros(8, 1)), batch_size=4)
for (x,) in loader:
    raise ValueError(f"shapes do not match: {tuple(x.shape)} against (4, 3)")
