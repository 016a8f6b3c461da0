"""The daemon's start-up, before the service takes its first item: its state dir opened (made
private, locked, its store checked for tenants the config no longer names) and the core
built for this node (the node detected or simulated, the throughput model's keeper, the
scheduler with its GPU pool and tenant shares)."""

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from allocator import ThroughputModel
from daemon import private
from daemon.config import DaemonConfig
from daemon.host import NodeResources, detect_node, simulated_node
from daemon.limits import Limits
from daemon.statelock import URL_FILE, StateDirLock, StoreError, local_url
from daemon.store import Store
from daemon.tenants import UnixUser, check_stored_tenants, unix_users
from daemon.tpmkeeper import TpmKeeper
from scheduler.admission import GpuPool, TenantShare
from scheduler.scheduler import Scheduler

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StateDir:
    """The state dir, opened: locked, its store open, its tenants' unix users."""

    path: Path
    lock: StateDirLock
    users: dict[str, UnixUser]
    store: Store


def open_state_dir(config: DaemonConfig) -> StateDir:
    """Make the state dir private, lock it, say where the daemon listens, open its store."""
    # Absolute: agents and command jobs run in other directories (a job's workdir) and
    # must reach the same socket and write to the same job folders.
    state_dir = config.state_dir.resolve()
    os.umask(private.UMASK)  # what it and its jobs write is their owner's alone
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock = StateDirLock(state_dir)  # before touching anything in it
    # Where it listens, for the CLI on this machine: a daemon on another port than the
    # default is found from its state dir (cli/connection.py).
    (state_dir / URL_FILE).write_text(local_url(config.host, config.port) + "\n")
    users = unix_users(config)
    opened = private.tighten(state_dir, passable=bool(users))
    if opened:
        log.warning("%d paths in %s were open to others: now 0600/0700", opened, state_dir)
    store = _opened(state_dir / "stoker.db", config.limits)
    try:
        check_stored_tenants(store, config)  # never launch a tenant's job as root
    except StoreError:
        store.close()
        lock.release()
        raise
    return StateDir(state_dir, lock, users, store)


def build_core(
    config: DaemonConfig, store: Store, model: ThroughputModel
) -> tuple[NodeResources, TpmKeeper, Scheduler]:
    """The node, the throughput model's keeper and the scheduler core for it."""
    # What the config leaves unset, from the host; simulated agents simulate a node.
    simulated = config.agent_mode == "simulate"
    node = detect_node(simulated_node(config.node) if simulated else config.node)
    # A node that trains on its CPUs plans on one budget of them (allocator/cpunode.py);
    # not with `node.cpu_sets`, where each job keeps to its own cores.
    shared = not node.uses_gpus and not node.cpu_sets
    cores = float(node.cpus.usable) if shared else None
    tpm = TpmKeeper(config, store, model, node.cpu_workers, cores)
    scheduler = Scheduler(
        tpm.node_spec(),
        tpm.rates,
        config.scheduler,
        GpuPool(
            node.slots,
            config.node.max_jobs_per_gpu,
            {
                name: TenantShare(policy.weight, policy.max_running_jobs)
                for name, policy in config.tenants.items()
            },
        ),
        plans_inline=False,  # the service makes them (daemon/planner.py)
    )
    return node, tpm, scheduler


def _opened(path: Path, limits: Limits) -> Store:
    """The state database, with what one job may report bounded."""
    store = Store(path)
    store.reported.limit(limits.max_metric_series_per_job, limits.metrics_per_s)
    return store
