"""How the CLI words a job's state from the daemon's replies: which states are final, and
what a completed job's processes did after its final step. `stoker jobs`, `stoker show`,
`stoker events` and the end of `stoker logs -f` say it alike."""

from typing import Any

FINAL_STATES = ("completed", "failed", "cancelled")


def after_end(job: dict[str, Any]) -> str:
    """What a completed job's processes did after its final step, when it was not an exit
    0 (its script failed saving, say): said beside its state, which stays `completed`."""
    code = job.get("exit_code")  # absent from an older daemon's reply
    if job["state"] != "completed" or not job.get("failed_after_end") or not code:
        return ""
    return f", then its script {_exited(code)} after its final step"


def _exited(code: int) -> str:
    return f"exited with code {code}" if code > 0 else f"was killed by signal {-code}"
