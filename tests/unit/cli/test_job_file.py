"""A job file the daemon could not be sent: TOML's nan and inf, which JSON has not, are
told by the field, before any daemon is asked (a traceback from the HTTP client before)."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ("model_params = inf", "model_params"),
        ("knee_sharpness = nan", "knee_sharpness"),
        ('profile = { workers_per_gpu = [1, 2, 4], samples_per_s = [100, nan, 250] }',
         "profile.samples_per_s[1]"),
    ],
)  # fmt: skip
def test_a_number_json_cannot_carry_is_named_with_its_field(
    tmp_path: Path, fields: str, where: str
) -> None:
    job = tmp_path / "job.toml"
    job.write_text(f'name = "j"\ncommand = ["python", "train.py"]\n{fields}\n')
    # Port 9 (discard): nothing answers there, and nothing is asked.
    run = CliRunner().invoke(app, ["submit", "--url", "http://127.0.0.1:9", str(job)])
    assert run.exit_code == 2, run.output
    assert f"{job}: {where}: not a finite number; give one" in run.stderr
    assert "Traceback" not in run.stderr
