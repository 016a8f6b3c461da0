"""Settings every test shares: Hypothesis's profiles. `ci` (the default) is derandomized,
so a property test fails the same way on every run and machine, and keeps no example
database in the clone; `dev` (HYPOTHESIS_PROFILE=dev) explores fresh examples each run."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
