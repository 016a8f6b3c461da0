"""The import rules of DESIGN.md, as import-linter contracts in pyproject.toml, hold for
this tree and fail on a deliberate violation (`make lint` runs the same `lint-imports`)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("allocator", "tpm", "scheduler", "daemon", "agents", "fpga_driver", "workloads")
LINT = Path(sys.executable).with_name("lint-imports")


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT), "--no-cache", str(tree / "pyproject.toml")],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the project's packages and contracts, to break on purpose."""
    for package in (*PACKAGES, "cli", "bench", "tests"):
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        (
            "scheduler/telemetry.py",
            "import daemon.store",
            "scheduler is not allowed to import daemon",
        ),
        ("fpga_driver/pool.py", "import torch", "fpga_driver is not allowed to import torch"),
        (
            "daemon/gpus.py",
            "from agents import data",
            "daemon is not allowed to import agents.data",
        ),
        ("workloads/truth.py", "import daemon", "workloads is not allowed to import daemon"),
        ("bench/common.py", "import tests.unit", "bench is not allowed to import tests"),
        ("daemon/summary.py", "import cli", "daemon is not allowed to import cli"),
        # Issue 38: imports inside the daemon point down, and no package has a circle.
        (
            "daemon/store/jobs.py",
            "import daemon.service",
            "daemon.store is not allowed to import daemon.service",
        ),
        ("scheduler/jobs.py", "import scheduler.lifecycle", "No cycles are allowed in scheduler"),
    ],
)
def test_a_deliberate_violation_fails_the_contracts(
    tree: Path, module: str, line: str, broken: str
) -> None:
    assert lint(tree).returncode == 0, "the copy holds before it is broken"
    path = tree / module
    path.write_text(f"{path.read_text()}\n{line}  # noqa\n")
    run = lint(tree)
    assert run.returncode == 1, run.stdout
    assert broken in run.stdout


def test_a_new_daemon_module_must_be_placed_in_its_layers(tree: Path) -> None:
    (tree / "daemon" / "newthing.py").write_text("x = 1\n")
    run = lint(tree)
    assert run.returncode == 1, run.stdout
    assert "not listed as layers" in run.stdout and "daemon.newthing" in run.stdout
