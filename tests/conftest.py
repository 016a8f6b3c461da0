"""Settings every test shares. Hypothesis's profiles: `ci` (the default) is derandomized,
so a property test fails the same way on every run and machine, and keeps no example
database in the clone; `dev` (HYPOTHESIS_PROFILE=dev) explores fresh examples each run.
And one thread for PyTorch in the suite and every process it starts, as the daemon gives
its jobs (daemon/agentargs.py): tests run side by side on every core, and PyTorch's
default of a thread a core spins them against each other. And `-n auto` (pytest-xdist,
pyproject.toml) starts two workers a core: half of an integration test's time is waiting
(for a daemon, a window, a heartbeat), and a second test fills it (on 2 cores, 519 s
against 594 s for the same tests: docs/results.md). And bytecode is cached even where the
host says not to (PYTHONDONTWRITEBYTECODE, as this machine's image does): the suite starts
about 500 Python processes (daemons, `stoker` commands, job scripts), and each would compile
the project's modules from source again."""

import os
import sys

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Two workers for each core this process may run on (affinity, as the daemon counts)."""
    return 2 * len(os.sched_getaffinity(0))
