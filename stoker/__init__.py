"""`import stoker`: the SDK a training script uses (implemented in `agents/sdk.py` and
the modules it names).

    job = stoker.init()
    loader = job.loader(dataset, batch_size=64, shuffle=True)
    job.track(model=model, optimizer=optimizer)
    for epoch in job.epochs(10):
        for x, y in loader:
            ...
            job.report(loss=loss)

docs/sdk.md has the whole API, what it does without a daemon, and the environment a job
gets from the daemon.
"""

from agents.control import Allocation
from agents.environment import JobEnvironment
from agents.sdk import Job, init

__all__ = ["Allocation", "Job", "JobEnvironment", "init"]
