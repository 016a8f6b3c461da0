"""`stoker dataset make`, and the rule that the daemon's side never loads torch."""

import subprocess
import sys
from pathlib import Path

from PIL import Image

from tests.integration.cli import stoker


def test_dataset_make_writes_jpegs_and_an_index(tmp_path: Path) -> None:
    run = stoker("dataset", "make", tmp_path / "data", "--images", "12", "--size", "40")
    assert run.code == 0, run.stderr
    files = sorted((tmp_path / "data").glob("*.jpg"))
    assert len(files) == 12
    with Image.open(files[0]) as image:
        assert image.format == "JPEG" and image.size == (40, 40)
    bad = stoker("dataset", "make", tmp_path / "none", "--images", "0")
    assert bad.code == 2 and "--images" in bad.stderr


def test_the_daemon_and_its_cli_never_import_torch() -> None:
    probe = (
        "import sys, daemon.cli, daemon.api, daemon.service; "
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0
