"""Whom tenants' jobs run as: the unix users of `unix_users` in the config, and what an
operator should be told when jobs run as the daemon's own user."""

import os
import pwd
from dataclasses import dataclass

from daemon.config import DaemonConfig

ADMIN = "admin"  # the tenant that sees every job, and alone may refit and scrape /metrics


@dataclass(frozen=True)
class UnixUser:
    """A tenant's unix account, which its jobs run as."""

    name: str
    uid: int
    gid: int
    home: str


def unix_users(config: DaemonConfig) -> dict[str, UnixUser]:
    """Tenant -> the unix user its jobs run as (the config checked that they exist)."""
    found = {tenant: pwd.getpwnam(name) for tenant, name in config.unix_users.items()}
    return {
        tenant: UnixUser(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)
        for tenant, entry in found.items()
    }


def user_warnings(config: DaemonConfig, users: dict[str, UnixUser]) -> tuple[str, ...]:
    """What an operator should know about whom jobs run as (logged at start, in /v1/node)."""
    me = pwd.getpwuid(os.geteuid()).pw_name
    if os.geteuid() != 0:
        return (
            f"jobs run as the daemon's own user ({me}): every tenant's job can read the "
            "others' files and the daemon's state; run the daemon as root with unix_users "
            "(tenant -> unix user) to separate them",
        )
    tenants = sorted({*config.tokens, "admin"} - set(users))
    if not tenants:
        return ()
    return (
        f"jobs of {', '.join(tenants)} run as root, the daemon's own user: map each tenant to "
        "an unprivileged unix user in unix_users",
    )
