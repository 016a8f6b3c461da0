"""A script that knows nothing of stoker: it prints, sleeps and exits with the code asked.
Arguments: SECONDS EXIT_CODE. With IGNORE_TERM in its environment it ignores SIGTERM, as a
process stuck in a native call does."""

import os
import signal
import sys
import time

if os.environ.get("IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("plain: ignoring SIGTERM", flush=True)
seconds, code = float(sys.argv[1]), int(sys.argv[2])
print(f"plain: running {seconds} s")  # no flush, as most scripts
time.sleep(seconds)
if code:
    print(f"plain: giving up with {code}", file=sys.stderr)
sys.exit(code)
