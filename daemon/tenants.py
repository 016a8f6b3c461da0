"""Whom tenants' jobs run as: the unix users of `unix_users` in the config, and what an
operator should be told when jobs run as the daemon's own user."""

import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from daemon.config import DaemonConfig
from daemon.statelock import StoreError
from daemon.store import Store

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
    warnings = []
    mapped_to_root = {tenant for tenant, user in users.items() if user.uid == 0}
    tenants = sorted(({*config.tokens, ADMIN} - set(users)) | mapped_to_root)
    if tenants:
        warnings.append(
            f"jobs of {', '.join(tenants)} run as root: map each tenant to an unprivileged"
            " unix user in unix_users"
        )
    sharing: dict[str, list[str]] = {}
    for tenant, user in sorted(users.items()):
        sharing.setdefault(user.name, []).append(tenant)
    for name, tenants in sharing.items():
        if len(tenants) > 1:
            warnings.append(
                f"jobs of {', '.join(tenants)} run as one unix user, {name}: each can read and"
                " stop the others' (give each tenant a user of its own in unix_users)"
            )
    return tuple(warnings)


def closed_parents(state_dir: Path, users: dict[str, UnixUser]) -> tuple[str, ...]:
    """A warning when the tenants' users cannot pass through a folder above `state_dir`
    (no `x` for others): their jobs could not reach their own folders in it."""
    if not users:
        return ()
    for folder in state_dir.resolve().parents:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            return (
                f"{folder} (mode {mode & 0o777:o}) lets no other user through to the state dir"
                f" {state_dir}: jobs run as {', '.join(sorted({u.name for u in users.values()}))}"
                f" cannot reach their folders; `chmod o+x {folder}`, or keep the state dir where"
                " they may pass (/var/lib/stoker)",
            )
    return ()


def check_stored_tenants(store: Store, config: DaemonConfig) -> None:
    """Raise StoreError when the store holds unfinished jobs of tenants the config gives no
    token: a root daemon started without the config that maps them to their unix users
    would launch them as root, and no one could reach them."""
    tenants = set(config.tokens) or {ADMIN}  # no tokens: the admin's, in the state dir
    unknown = sorted({job.tenant for job in store.jobs() if not job.job_state.final} - tenants)
    if unknown:
        raise StoreError(
            f"{store.path.parent} holds unfinished jobs of {', '.join(unknown)}, whom this"
            f" config gives no token (it names {', '.join(sorted(tenants))}): start the"
            " daemon with the config that names them (--config FILE); to end their jobs,"
            " start it so and `stoker cancel` them"
        )
