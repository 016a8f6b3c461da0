"""A plain script (no SDK, no torch: any python runs it) that says whom it runs as and what
it can read: the daemon's database and another job's directory must be closed to it."""

import os
import sys
from pathlib import Path

job_dir = Path(os.environ["STOKER_JOB_DIR"])
state_dir = job_dir.parents[1]


def reach(path: Path) -> str:
    try:
        if path.is_dir():
            os.listdir(path)
        else:
            path.read_bytes()
    except PermissionError:
        return "denied"
    return "open"


print(f"uid={os.getuid()} user={os.environ.get('USER')} home={os.environ.get('HOME')}")
print(f"db={reach(state_dir / 'stoker.db')} jobs={reach(state_dir / 'jobs')}")
print(f"other={reach(state_dir / 'jobs' / sys.argv[1])}")
(Path(os.environ["STOKER_OUTPUT_DIR"]) / "result.txt").write_text("written\n")
