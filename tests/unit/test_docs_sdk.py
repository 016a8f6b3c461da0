"""docs/sdk.md's diff is the diff of the two example files, and it stays small."""

import difflib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_sdk_page_shows_the_examples_real_diff_of_at_most_8_lines() -> None:
    plain = (ROOT / "examples" / "plain" / "image_classifier_plain.py").read_text().splitlines()
    sdk = (ROOT / "examples" / "image_classifier.py").read_text().splitlines()
    diff = list(
        difflib.unified_diff(
            plain, sdk, "plain/image_classifier_plain.py", "image_classifier.py", lineterm=""
        )
    )
    page = (ROOT / "docs" / "sdk.md").read_text()
    shown = page.split("```diff\n", 1)[1].split("\n```", 1)[0].splitlines()
    # `diff -u` and difflib differ only in the header's timestamps.
    assert [line.split("\t")[0] for line in shown] == diff
    changed = [line for line in diff[2:] if line.startswith("+") and line.strip("+ ")]
    assert len(changed) <= 8, changed
