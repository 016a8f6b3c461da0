"""Settings come from flags, STOKER_ variables and a TOML file, and bad ones are named."""

import dataclasses
import os
from pathlib import Path

import pytest

from daemon.config import ConfigError, DaemonConfig, load_config
from scheduler.config import SchedulerConfig


def test_flags_beat_the_environment_which_beats_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "stoker.toml"
    path.write_text('port = 1000\nhost = "10.0.0.1"\n[node]\ncpu_workers = 4\n')
    monkeypatch.setenv("STOKER_PORT", "2000")
    monkeypatch.setenv("STOKER_NODE__CPU_WORKERS", "6")
    config = load_config(path, port=3000)
    assert config.port == 3000
    assert config.node.cpu_workers == 6
    assert config.host == "10.0.0.1"
    assert load_config(None).host == "127.0.0.1"  # binds loopback unless told


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('[scheduler]\npolicy = "fastest"\n', "scheduler.policy"),
        ("colour = 1\n", "colour"),
        ("[node]\ncpu_workers = 0\n", "node.cpu_workers"),
        ("port = [\n", "--config"),
        # A token two tenants share, or none, is whoever holds it: alice would be the admin.
        ('[tokens]\nadmin = "secret"\nalice = "secret"\n', "admin and alice have the same token"),
        ('[tokens]\nadmin = "secret"\nbob = " "\n', "bob: an empty token"),
        # Agents beating less often than the timeout allows would all be taken as lost.
        (
            "heartbeat_s = 5.0\n[scheduler]\nheartbeat_timeout_s = 2.0\n",
            "scheduler.heartbeat_timeout_s (2 s) must be more than twice heartbeat_s (5 s)",
        ),
    ],
)
def test_bad_settings_name_the_key(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "stoker.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert named in str(raised.value)


@pytest.mark.parametrize(
    ("variable", "said"),
    [
        ("STOKER_MAX_RESTART", "STOKER_MAX_RESTART: no daemon setting 'max_restart'"),
        (
            "STOKER_NODE__CPU_WORKER",
            "STOKER_NODE__CPU_WORKER: not a setting; did you mean STOKER_NODE__CPU_WORKERS?",
        ),
        (  # a section and its setting joined by one underscore
            "STOKER_NODE_CPU_WORKERS",
            "STOKER_NODE_CPU_WORKERS: no daemon setting 'node_cpu_workers' (docs/daemon.md);"
            " did you mean STOKER_NODE__CPU_WORKERS? (a section's setting takes __)",
        ),
        (  # a section of the core's own, a dataclass
            "stoker_scheduler__arival_window_s",
            "stoker_scheduler__arival_window_s: not a setting; "
            "did you mean STOKER_SCHEDULER__ARRIVAL_WINDOW_S?",
        ),
    ],
)
def test_a_misspelt_variable_stops_the_start_naming_it_and_the_setting_meant(
    monkeypatch: pytest.MonkeyPatch, variable: str, said: str
) -> None:
    monkeypatch.setenv(variable, "3")
    monkeypatch.setenv("STOKER_URL", "http://127.0.0.1:1")  # the CLI's: no setting, no error
    with pytest.raises(ConfigError) as raised:
        load_config()
    assert str(raised.value).startswith(said)


@pytest.mark.parametrize(
    "table",
    [
        pytest.param(
            "unix_users",
            marks=pytest.mark.skipif(os.geteuid() != 0, reason="unix_users need a root daemon"),
        ),
        "tenants",
    ],
)
def test_a_tenant_without_a_token_is_refused_with_the_one_meant(tmp_path: Path, table: str) -> None:
    value = '"nobody"' if table == "unix_users" else "{ max_running_jobs = 1 }"
    path = tmp_path / "stoker.toml"
    path.write_text(f'[tokens]\nalice = "{"b" * 24}"\n[{table}]\nalcie = {value}\n')
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert str(raised.value).startswith(f"{table}.alcie: no tenant 'alcie' has a token")
    assert "did you mean 'alice'?" in str(raised.value)


def test_a_bad_value_from_the_environment_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("STOKER_NODE__GPUS", "two")
    with pytest.raises(ConfigError) as raised:
        load_config()
    assert str(raised.value).startswith("STOKER_NODE__GPUS: Input should be a valid integer")
    monkeypatch.delenv("STOKER_NODE__GPUS")
    path = tmp_path / "stoker.toml"
    path.write_text("[scheduler]\narival_window_s = 3\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert str(raised.value) == (
        f"scheduler.arival_window_s (in {path}): not a setting; did you mean 'arrival_window_s'?"
    )


def test_every_mistake_of_a_file_is_named_at_once(tmp_path: Path) -> None:
    path = tmp_path / "stoker.toml"
    path.write_text("[node]\ncpu_worker = 3\n[scheduler]\narival_window_s = 3\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert str(raised.value).splitlines() == [
        f"node.cpu_worker (in {path}): not a setting; did you mean 'cpu_workers'?",
        f"scheduler.arival_window_s (in {path}): not a setting; did you mean 'arrival_window_s'?",
    ]


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no file"):
        load_config(tmp_path / "absent.toml")


def test_the_example_in_docs_daemon_md_is_a_valid_config(tmp_path: Path) -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "daemon.md").read_text()
    example = doc.split("```toml\nstate_dir")[1].split("```")[0]
    path = tmp_path / "example.toml"
    path.write_text("state_dir" + example)
    config = load_config(path)
    assert config.agent_mode == "process" and config.training.image_size is None
    assert config.node.cpu_workers is None, "left to the host"
    assert config.scheduler.min_refit_r2 == 0.5 and config.tokens == {"admin": "change-me"}


def test_the_example_config_loads_and_names_every_setting() -> None:
    example = Path(__file__).resolve().parents[3] / "configs" / "daemon.toml"
    config = load_config(example)
    assert config.scheduler == SchedulerConfig()  # its values are the defaults
    assert config.model_dump(exclude={"scheduler"}) == DaemonConfig().model_dump(
        exclude={"scheduler"}
    )
    text = example.read_text()
    for field in dataclasses.fields(SchedulerConfig):
        # A setting unset by default (TOML has no null) is shown commented out.
        shown = f"\n{field.name} = " in text
        unset = field.default is None and f"\n# {field.name} = " in text
        assert shown or unset, f"configs/daemon.toml does not document scheduler.{field.name}"
    for name in DaemonConfig.model_fields:
        assert f"{name} = " in text or f"[{name}]" in text, name


def test_relative_paths_of_a_file_are_its_folders_and_a_variable_s_stay_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Started from another folder, `tpm = "model.json"` beside the file was not found.
    folder = tmp_path / "cfg"
    folder.mkdir()
    path = folder / "stoker.toml"
    path.write_text(
        'tpm = "model.json"\nstate_dir = "state"\n[training]\ndefault_dataset = "data"\n'
    )
    monkeypatch.chdir(tmp_path)
    config = load_config(path)
    assert config.tpm == folder / "model.json"
    assert config.training.default_dataset == folder / "data"
    assert config.state_dir == Path("state"), "the start folder's: the CLI looks for it there"
    monkeypatch.setenv("STOKER_TPM", "mine.json")
    assert load_config(path).tpm == Path("mine.json"), "the variable's, as given"
