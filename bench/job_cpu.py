"""The CPU seconds each job of a live daemon has used, read from its process trees: every
agent the daemon started (each rank, each launch) is a child of the daemon whose
environment names its job (`STOKER_JOB_ID`); an agent's seconds are its own, its live
descendants' (the DataLoader workers, a wrapper's children) and those of the descendants
reaped already (in their parents' `children_*` clocks, so each second counts once). A
job's seconds are the sum over every agent of it ever seen, each at the most a reading saw.

Read it often (`read`, every 0.25 s in bench_live_gain): a process's last seconds before it
is reaped are not seen, so the figure is at most a reading's worth short of the truth."""

from collections import defaultdict

import psutil


class JobCpu:
    """What each job of the daemon at `daemon_pid` has used so far, by job id."""

    def __init__(self, daemon_pid: int) -> None:
        self._daemon = psutil.Process(daemon_pid)
        # (pid, start time) of each agent ever seen -> (its job, the most it was seen at)
        self._agents: dict[tuple[int, float], tuple[str, float]] = {}
        self.unreadable = 0  # agents whose environment or clocks could not be read

    @property
    def seconds(self) -> dict[str, float]:
        """CPU seconds by job id."""
        total: defaultdict[str, float] = defaultdict(float)
        for job, most in self._agents.values():
            total[job] += most
        return dict(total)

    def read(self) -> None:
        """Take a reading of every agent alive now."""
        for agent in self._daemon.children():
            try:
                job = agent.environ().get("STOKER_JOB_ID")
                key = (agent.pid, agent.create_time())
                used = _tree_seconds(agent)
            except psutil.AccessDenied:
                self.unreadable += 1  # a tenant's job, another user's: run the bench as root
                continue
            except psutil.Error:  # ended between the listing and the reading
                continue
            if job is None:
                continue
            _, most = self._agents.get(key, (job, 0.0))
            self._agents[key] = (job, max(most, used))


def _tree_seconds(agent: psutil.Process) -> float:
    """An agent's seconds now: its own, its live descendants', and those they reaped."""
    used = _seconds(agent)
    for process in agent.children(recursive=True):
        try:
            used += _seconds(process)
        except psutil.Error:  # reaped since: its seconds are in its parent's clocks now
            continue
    return used


def _seconds(process: psutil.Process) -> float:
    """A process's own seconds and those of the children it reaped."""
    times = process.cpu_times()
    return float(times.user + times.system + times.children_user + times.children_system)
