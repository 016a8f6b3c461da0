"""Who may speak for a job over the agent link: the secret each launch is given (stored, so
that a restarted daemon re-attaches with it), whether the job's agent has proved it, and the
protocol version each agent's hello spoke (the daemon answers in it)."""

import hmac
import secrets
import time
from collections.abc import Callable

from agents.protocol import AgentMessage, Hello
from daemon.agentlink import AgentLink
from daemon.config import DaemonConfig
from daemon.store import Store


class AgentKeys:
    def __init__(
        self,
        config: DaemonConfig,
        store: Store,
        link: AgentLink,
        has_agent: Callable[[str], bool],
    ) -> None:
        self._config = config
        self._store = store
        self._link = link
        self._has_agent = has_agent  # whether the job has, or may have, an agent now
        # job -> the secret of its current launch (stored: a restart re-attaches with it);
        # the jobs whose agent has proved it, after which every message must carry it.
        self.secrets: dict[str, str] = {}
        self._secured: set[str] = set()
        self._versions: dict[str, int] = {}  # protocol version of each agent's hello

    def new_secret(self, job_id: str) -> str:
        """A secret for the job's next launch, stored before the launch so that a daemon
        restarted meanwhile knows it; the old one no longer counts."""
        secret = secrets.token_urlsafe(24)
        self._store.update_job(job_id, time.time(), agent_secret=secret)
        self.secrets[job_id] = secret
        self._secured.discard(job_id)
        self._link.forget(job_id)  # the old launch's connection no longer answers for it
        return secret

    def authentic(self, message: AgentMessage) -> bool:
        """Whether `message` may speak for its job: it carries the secret of the job's
        launch. With `agent_secrets = "when-sent"`, one that carries none passes too while
        the job's agent has not yet sent the secret (an older SDK sends none). A job
        launched by a daemon that gave no secret is taken at its word. A message without
        the secret never speaks for a job that has no agent: one waiting for its launch."""
        expected = self.secrets.get(message.job, "")
        if message.secret and expected:
            if hmac.compare_digest(message.secret.encode(), expected.encode()):
                self._secured.add(message.job)
                return True
            return False
        if expected:
            lenient = self._config.agent_secrets == "when-sent"
            if not lenient or message.job in self._secured:
                return False
        # Unproved: only for a job whose agent may run (a queued job's `finished` from any
        # process on the socket would complete it unrun; submitted -> completed is legal).
        return self._has_agent(message.job)

    def spoke(self, hello: Hello) -> None:
        """Keep the protocol version of an agent's hello (a re-attached one's too)."""
        self._versions[hello.job] = hello.v

    def version(self, job_id: str, default: int) -> int:
        return self._versions.get(job_id, default)
