"""configs/stoker.service, the systemd unit docs/operations.md installs, is one systemd
takes as written, and starts `stoker serve` with options it has."""

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.cli import REPO, STOKER, stoker

UNIT = REPO / "configs" / "stoker.service"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_the_systemd_unit_is_valid(tmp_path: Path) -> None:
    text = UNIT.read_text()
    (line,) = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    program, command, *options = line.removeprefix("ExecStart=").split()
    assert program == "/opt/stoker/.venv/bin/stoker" and command == "serve"
    named = [option for option in options if option.startswith("--")]
    help_text = stoker("serve", "--help").stdout
    assert all(option in help_text for option in named), (named, help_text)
    # Checked with this checkout's `stoker` in the unit's place (the unit names /opt/...).
    unit = tmp_path / "stoker.service"
    unit.write_text(text.replace(program, str(STOKER)))
    checked = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0 and checked.stderr == "", checked.stderr
