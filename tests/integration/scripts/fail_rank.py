"""A two-rank job whose rank 1 fails at once while rank 0 waits for it (as in a collective)."""

import os
import sys
import time

if os.environ["RANK"] == "1":
    sys.exit("rank 1: out of memory on its GPU")
time.sleep(60)
