"""A script that knows nothing of stoker: it prints, sleeps and exits with the code asked.
Arguments: SECONDS EXIT_CODE."""

import sys
import time

seconds, code = float(sys.argv[1]), int(sys.argv[2])
print(f"plain: running {seconds} s")  # no flush, as most scripts
time.sleep(seconds)
if code:
    print(f"plain: giving up with {code}", file=sys.stderr)
sys.exit(code)
