"""What `stoker submit --follow` and `stoker logs -f` print of a failed job's reason."""

from cli.job_logs import _unrepeated

TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "train.py", line 9, in <module>',
    "ValueError: bad shape",
]
REASON = "exited with code 1; stderr ends:\n" + "\n".join(TRACEBACK)


def test_a_tail_just_shown_is_not_quoted_again() -> None:
    shown = ["epoch 0", "", *TRACEBACK]  # a blank line the reason leaves out
    refused = "not relaunched: it failed before its first step"
    assert _unrepeated(f"{REASON}\n{refused}", shown) == (
        f"exited with code 1; its stderr ends as shown above\n{refused}"
    )


def test_a_tail_cut_at_its_start_still_matches() -> None:
    shown = ["x" * 50 + TRACEBACK[0], *TRACEBACK[1:]]
    assert _unrepeated(REASON, shown) == "exited with code 1; its stderr ends as shown above"


def test_a_tail_not_shown_stays() -> None:
    assert _unrepeated(REASON, []) == REASON, "nothing shown: --stdout, or --tail 0"
    assert _unrepeated(REASON, [*TRACEBACK, "written after"]) == REASON, "not the last lines"
    assert _unrepeated("exited with code 1", TRACEBACK) == "exited with code 1"


def test_another_rank_s_tail_stays() -> None:
    other = "rank 1 exited with code 1; stderr ends:\n" + "\n".join(TRACEBACK)
    assert _unrepeated(other, TRACEBACK) == other, "what was shown is rank 0's"
