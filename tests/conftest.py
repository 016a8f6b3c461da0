"""Settings every test shares. Hypothesis's profiles: `ci` (the default) is derandomized,
so a property test fails the same way on every run and machine, and keeps no example
database in the clone; `dev` (HYPOTHESIS_PROFILE=dev) explores fresh examples each run.
And one thread for PyTorch in the suite and every process it starts, as the daemon gives
its jobs (daemon/agentargs.py): tests run side by side on every core, and PyTorch's
default of a thread a core spins them against each other."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
os.environ.setdefault("OMP_NUM_THREADS", "1")
