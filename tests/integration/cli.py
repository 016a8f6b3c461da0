"""Run the installed `stoker` console script as a user would, in a subprocess."""

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

STOKER = Path(sys.executable).parent / "stoker"
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Run:
    """What one command printed and how it exited."""

    code: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, object]:
        payload = json.loads(self.stdout)
        assert isinstance(payload, dict)
        return payload


def stoker(*args: str | Path, cwd: Path | None = None, timeout: float = 60) -> Run:
    """`stoker ARGS...`, with a timeout so that a hang fails the test instead of CI."""
    done = subprocess.run(
        [str(STOKER), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or REPO,
        check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr)
