"""The collaborators the daemon's service hands its parts (the hands that carry commands
out, the restorer, the agent input, the views, the shutdown): one `Parts` built once by
`Service`, so that no part imports the service (no import circle), and `Held`, the per-job
bookkeeping the hands keep between one command and the next, in one place."""

from collections.abc import Callable
from dataclasses import dataclass, field

from daemon.agentkeys import AgentKeys
from daemon.agentlink import AgentLink
from daemon.config import DaemonConfig
from daemon.host import NodeResources
from daemon.jobbook import JobBook
from daemon.launcher import Launcher
from daemon.metrics import Metrics
from daemon.progress import Pace
from daemon.snapshot import Counts, Measured
from daemon.store import Store
from daemon.tpmkeeper import TpmKeeper
from scheduler.messages import Event
from scheduler.scheduler import Scheduler


@dataclass
class Held:
    """What the daemon keeps of each job between commands: its effects' bookkeeping (the
    CPUs it is pinned to, the figures last stored) and what the views show. No decision:
    the checkpoint a launch starts from is the core's (`Launch.resume_from`)."""

    pinned: dict[str, tuple[int, ...]] = field(default_factory=dict)  # `node.cpu_sets`: its CPUs
    # job -> where its script last said it ends, and the samples its steps take
    said: dict[str, tuple[int, int]] = field(default_factory=dict)
    measured: dict[str, Measured] = field(default_factory=dict)  # job -> its last heartbeat
    pace: Pace = field(default_factory=Pace)  # each running job's iterations, last minute
    reported: dict[str, dict[str, float]] = field(default_factory=dict)  # newest reported


@dataclass
class Parts:
    """The service's collaborators, and its clock and its way into the core."""

    config: DaemonConfig
    store: Store
    launcher: Launcher
    scheduler: Scheduler
    link: AgentLink
    node: NodeResources
    tpm: TpmKeeper
    counters: Counts
    metrics: Metrics
    jobs: JobBook
    keys: AgentKeys
    decoder_endpoint: str
    now: Callable[[], float]  # seconds since the service started
    # An event to the core, its commands carried out; the core's refusal, None: taken.
    feed: Callable[[Event], Exception | None]
    held: Held = field(default_factory=Held)

    @property
    def uses_gpus(self) -> bool:
        return self.node.uses_gpus
