"""Building the settings: `load_config` reads flags, `STOKER_*` variables and the TOML
file into one `DaemonConfig`, makes the file's relative paths its folder's, and refuses a
misspelt variable or key with a message that names it as the operator set it (the
variable, or the key and its file) and the setting it likely meant. `with_scheduler`
changes the scheduler's settings from flags.
"""

import dataclasses
import difflib
import os
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails
from pydantic_settings import SettingsConfigDict

from daemon.config.settings import DaemonConfig


class ConfigError(ValueError):
    """A setting that cannot be used; the message names the key and what to change."""


# How pydantic says a key names no setting: of a model's, and of a dataclass's.
_UNKNOWN_KEY = frozenset({"extra_forbidden", "unexpected_keyword_argument"})
# `STOKER_` variables that are not settings: the CLI's, and those a job's launch gives the
# SDK (docs/sdk.md). Any other is a setting, or a misspelt one.
# fmt: off
NOT_SETTINGS = frozenset(f"STOKER_{name}" for name in (
    "URL", "TOKEN", "CACHE",  # the CLI's, and the model features' cache
    "JOB_ID", "JOB_DIR", "OUTPUT_DIR", "CHECKPOINT_DIR", "CHECKPOINT_EVERY_S", "ATTEMPT",
    "CONTROL", "GEN", "WORKERS", "HEARTBEAT_S", "AUDIT_DIR", "RESIZE", "PAUSED_AT", "DECODER",
    "DECODE_MODE", "DECODER_SHARE", "CPU_SLOTS", "PROTOCOL", "AGENT_SECRET", "CONTINUE_FROM",
))
# fmt: on


def load_config(path: Path | None = None, **overrides: object) -> DaemonConfig:
    """Settings from flags (`overrides`, None meaning unset), env and `path`."""
    environ = os.environ
    given = {key: value for key, value in overrides.items() if value is not None}
    if path is not None and not path.is_file():
        raise ConfigError(f"--config: no file at {path}")
    _refuse_unknown_variables(environ)

    class FromFile(DaemonConfig):
        model_config = SettingsConfigDict(toml_file=path)

    try:
        config = DaemonConfig.model_validate(FromFile(**given).model_dump())  # type: ignore[arg-type]
    except ValidationError as error:  # each one, so that one start names every mistake
        said = dict.fromkeys(_explain(each, environ, path) for each in error.errors())
        raise ConfigError("\n".join(said)) from None
    except ValueError as error:  # a TOML file that does not parse
        raise ConfigError(f"--config {path}: {error}") from None
    return config if path is None else _paths_from(path, config)


def _paths_from(path: Path, config: DaemonConfig) -> DaemonConfig:
    """`config` with the relative paths of the files its file at `path` names (`tpm`,
    `training.default_dataset`) made that file's folder's, as a job file's are, not the
    folder the daemon happens to start in; one that a flag or a variable gave instead stays
    as given. `state_dir` stays the start folder's, where the CLI looks for `.stoker`."""
    written = tomllib.loads(path.read_text())
    here = path.resolve().parent

    def placed(table: Mapping[str, object], key: str, value: Path | None) -> Path | None:
        raw = table.get(key)
        if isinstance(raw, str) and value == Path(raw) and not value.is_absolute():
            return here / value
        return value

    training = written.get("training")
    dataset = placed(training if isinstance(training, dict) else {}, "default_dataset",
                     config.training.default_dataset)  # fmt: skip
    return config.model_copy(
        update={
            "tpm": placed(written, "tpm", config.tpm),
            "training": config.training.model_copy(update={"default_dataset": dataset}),
        }
    )


def _refuse_unknown_variables(environ: Mapping[str, str]) -> None:
    """A `STOKER_` variable that names no setting is a misspelt one: pydantic-settings would
    pass over it, and the daemon start without what its operator set."""
    settings = sorted(DaemonConfig.model_fields)
    for name in sorted(environ):  # pydantic-settings reads them in any case
        if not name.upper().startswith("STOKER_") or name.upper() in NOT_SETTINGS:
            continue
        key = name[len("STOKER_") :].lower().split("__", 1)[0]
        if key not in settings:
            nested = _nested(key)
            if nested is not None:  # STOKER_NODE_CPU_WORKERS
                hint = f"; did you mean STOKER_{nested.upper()}? (a section's setting takes __)"
            else:
                close = difflib.get_close_matches(key, settings, n=1)
                hint = f"; did you mean STOKER_{close[0].upper()}?" if close else ""
            raise ConfigError(f"{name}: no daemon setting {key!r} (docs/daemon.md){hint}")


def _nested(key: str) -> str | None:
    """`section__setting` for a `key` that joins a section and one of its settings with a
    single underscore (`node_cpu_workers`); None when it does not."""
    for section, field in DaemonConfig.model_fields.items():
        inner = _fields(field.annotation)
        rest = key.removeprefix(section + "_")
        if inner and rest != key and rest in inner:
            return f"{section}__{rest}"
    return None


def _explain(error: ErrorDetails, environ: Mapping[str, str], path: Path | None) -> str:
    """A setting's error, named as the operator set it: the variable when the environment
    did (`STOKER_NODE__CPU_WORKERS`), else the key and the file; for a key that names no
    setting, the one it may have meant."""
    loc = tuple(str(part) for part in error["loc"])
    joined = "STOKER_" + "__".join(part.upper() for part in loc)
    variable = next((name for name in environ if name.upper() == joined), None)
    message = error["msg"].removeprefix("Value error, ")  # ours name their key
    if error["type"] in _UNKNOWN_KEY:
        close = _close_key(loc)
        meant = "STOKER_" + "__".join(p.upper() for p in (*loc[:-1], close)) if close else ""
        message = "not a setting"
        if close:
            message += f"; did you mean {meant if variable else repr(close)}?"
    if variable is not None:
        return f"{variable}: {message}"
    source = f" (in {path})" if path else ""
    where = ".".join(loc)
    return f"{where}{source}: {message}" if where else message + source


def _close_key(loc: tuple[str, ...]) -> str | None:
    """The setting the last part of `loc` may have meant, among its section's (a pydantic
    model's fields, or a dataclass's: `scheduler` is the core's `SchedulerConfig`)."""
    section: object = DaemonConfig
    for part in loc[:-1]:
        known = _fields(section)
        section = known.get(part) if known is not None else None
    known = _fields(section)
    if not known:
        return None
    close = difflib.get_close_matches(loc[-1], sorted(known), n=1)
    return close[0] if close else None


def _fields(section: object) -> dict[str, object] | None:
    """A config section's fields and their types; None for a value that has none."""
    if isinstance(section, type) and issubclass(section, BaseModel):
        return {name: field.annotation for name, field in section.model_fields.items()}
    if isinstance(section, type) and dataclasses.is_dataclass(section):
        return dict(typing.get_type_hints(section))
    return None


def with_scheduler(config: DaemonConfig, **changes: object) -> DaemonConfig:
    """`config` with some scheduler settings changed (`stoker serve --policy`); a bad value
    raises InvalidRequest naming it."""
    scheduler = dataclasses.replace(config.scheduler, **changes)  # type: ignore[arg-type]
    return config.model_copy(update={"scheduler": scheduler})
