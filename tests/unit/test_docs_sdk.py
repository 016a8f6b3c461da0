"""docs/sdk.md's diffs are the diffs of the example files against their plain versions,
and they stay small: 8 lines for a script with a DataLoader, at most 10 for each kind of
script without one (`job.steps`)."""

import difflib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("name", "most"),
    [("image_classifier", 8), ("language_model", 10), ("time_sequence", 10), ("regression", 10)],
)
def test_the_sdk_page_shows_each_examples_real_diff_and_it_is_small(name: str, most: int) -> None:
    plain = (ROOT / "examples" / "plain" / f"{name}_plain.py").read_text().splitlines()
    sdk = (ROOT / "examples" / f"{name}.py").read_text().splitlines()
    diff = list(
        difflib.unified_diff(plain, sdk, f"plain/{name}_plain.py", f"{name}.py", lineterm="")
    )
    page = (ROOT / "docs" / "sdk.md").read_text()
    blocks = [block.split("\n```", 1)[0].splitlines() for block in page.split("```diff\n")[1:]]
    (shown,) = [block for block in blocks if block[0].startswith(f"--- plain/{name}_plain.py")]
    # `diff -u` and difflib differ only in the header's timestamps.
    assert [line.split("\t")[0] for line in shown] == diff
    changed = [line for line in diff[2:] if line.startswith("+") and line.strip("+ ")]
    assert len(changed) <= most, changed
