"""A polynomial fitted by one linear layer, in the manner of pytorch/examples' regression:
each batch drawn afresh from the target function, plain SGD, until the loss is small (no
DataLoader, no epochs, no known length).

    python examples/regression.py   # alone; under the daemon: stoker submit -- python ...
"""

import torch
from torch.nn import functional

import stoker

DEGREE = 4
torch.manual_seed(0)
w_target = torch.randn(DEGREE, 1) * 5
b_target = torch.randn(1) * 5


def features(x: torch.Tensor) -> torch.Tensor:
    """[x, x^2, x^3, x^4] for each x."""
    x = x.unsqueeze(1)
    return torch.cat([x**i for i in range(1, DEGREE + 1)], 1)


def get_batch(batch_size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    x = features(torch.randn(batch_size))
    return x, x.mm(w_target) + b_target.item()


job = stoker.init()
fc = torch.nn.Linear(DEGREE, 1)
job.track(model=fc)
for batch_idx in (step + 1 for step in job.steps(samples=32)):  # noqa: B007
    batch_x, batch_y = get_batch()
    fc.zero_grad()
    output = functional.smooth_l1_loss(fc(batch_x), batch_y)
    loss = output.item()
    output.backward()  # type: ignore[no-untyped-call]
    for param in fc.parameters():
        assert param.grad is not None
        param.data.add_(-0.1 * param.grad)
    job.report(loss=loss)
    if loss < 1e-3:
        break
print(f"loss {loss:.6f} after {batch_idx} batches")
print(f"learned {fc.weight.view(-1).tolist()} + {fc.bias.item():.2f}")
print(f"actual  {w_target.view(-1).tolist()} + {b_target.item():.2f}")
