"""The CLI imports what a command needs when the command runs (DESIGN.md: the leaf CLI):
`stoker --help` loads no command's dependencies, and `stoker agent --simulate` loads the
simulated agent without torch. Each check runs the command in a fresh interpreter."""

import json
import subprocess
import sys
from pathlib import Path

import typer
import typer.main

from cli import COMMANDS

# Run `stoker ARGS` in this interpreter, then print the names of the loaded modules.
PROBE = """
import json, sys
from cli import app
try:
    app(sys.argv[1:], prog_name="stoker")
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""

# What no command's signature needs: each is imported by the command that uses it.
HEAVY = (
    "torch", "matplotlib", "agents", "daemon", "fpga_driver", "uvicorn", "httpx", "scipy",
    "sklearn",
)  # fmt: skip


def loaded_by(*args: str) -> set[str]:
    """The modules loaded by `stoker ARGS` (its own output, the last line aside, ignored)."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def packages(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


def test_help_loads_no_command_dependencies() -> None:
    modules = loaded_by("--help")
    assert "typer" in modules, "the probe ran the CLI"
    assert packages(modules) & set(HEAVY) == set()
    assert {"workloads.simulator", "workloads.timeline"} & modules == set()


def test_agent_simulate_loads_the_simulated_agent_without_torch() -> None:
    # An option the agent refuses: it is imported, parses its arguments and exits.
    modules = loaded_by("agent", "--simulate", "--no-such-option")
    assert "agents.simulated" in modules
    assert "agents.zoo" not in modules
    assert packages(modules) & {"torch", "matplotlib"} == set()


def test_python_m_cli_is_the_stoker_command(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "serve" in done.stdout and "agent" in done.stdout


def test_a_client_command_loads_only_its_own_module() -> None:
    # Neither numpy (the allocator's), nor the workload generator, nor the TPM: the ~160
    # `stoker` runs of the suite, and a user's, start in a fraction of the time.
    for args in ((), ("jobs", "--help")):
        modules = loaded_by(*args) if args else _imported_by_import_cli()
        assert packages(modules) & {"numpy", "workloads", "allocator", "tpm", "scheduler"} == set()


def _imported_by_import_cli() -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", "import json, sys, cli; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


def test_commands_names_every_command_of_each_module() -> None:
    """COMMANDS, the table that loads a command's module by name, lists every command that
    the module registers, with that module's loader."""
    for loader in set(COMMANDS.values()):
        module = typer.Typer(add_completion=False)
        loader(module)
        for name in typer.main.get_group(module).commands:
            assert COMMANDS.get(name) is loader, name
