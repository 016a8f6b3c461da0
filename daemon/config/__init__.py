"""The daemon's settings: one validated object built at start-up and passed down.

Sources, strongest first: `stoker serve` flags, `STOKER_*` environment variables
(`STOKER_PORT=9000`, `STOKER_NODE__CPU_WORKERS=12`), the TOML file given with `--config`,
then these defaults. pydantic-settings reads the environment and the file; a bad key or
value fails start-up with a message naming it (`load_config`).

- `settings.py`: `DaemonConfig`, the top-level settings and the checks that span sections
- `sections.py`: the `[node]`, `[simulated]`, `[tenants.<name>]` and `[training]` tables
- `loading.py`: `load_config` (flags, environment, TOML) and its error messages
"""

from daemon.config.loading import ConfigError, load_config, with_scheduler
from daemon.config.sections import TASKSET, NodeConfig, TenantPolicy
from daemon.config.settings import DaemonConfig

__all__ = [
    "TASKSET",
    "ConfigError",
    "DaemonConfig",
    "NodeConfig",
    "TenantPolicy",
    "load_config",
    "with_scheduler",
]
