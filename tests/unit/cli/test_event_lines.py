"""`stoker events` lines read as people read them: why after a colon, figures rounded."""

from cli.events import line


def event(kind: str, data: dict[str, object]) -> dict[str, object]:
    return {"at": 0.0, "job_id": "job-1", "kind": kind, "data": data}


def test_a_resume_says_its_gap_rounded_and_a_restore_says_why_after_a_colon() -> None:
    resumed = line(event("resumed", {"gen": 2, "workers": 2, "gap_s": 0.2792165279388428}))
    assert resumed.endswith("  job-1  resumed  gen 2, workers 2, gap_s 0.279")
    restored = line(
        event("restored", {"was": "running", "why": "the daemon restarted while it was running"})
    )
    assert restored.endswith("  restored  was running: the daemon restarted while it was running")
    assert line(event("state", {"from": "running", "to": "paused"})).endswith(
        "  state  running -> paused"
    )
