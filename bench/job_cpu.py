"""The CPU seconds each job of a live daemon has used, read from its process trees: every
agent the daemon started (each rank) is a child of the daemon whose environment names its
job (`STOKER_JOB_ID`); a job's seconds are its agents' own, their live descendants' (the
DataLoader workers) and those of the descendants they have reaped already.

Read it often (`read`, every 0.25 s in bench_live_gain): a process's last seconds before it
is reaped are not seen, so the figure is at most a reading's worth short of the truth."""

from collections import defaultdict

import psutil


class JobCpu:
    """What each job of the daemon at `daemon_pid` has used so far, by job id."""

    def __init__(self, daemon_pid: int) -> None:
        self._daemon = psutil.Process(daemon_pid)
        self.seconds: dict[str, float] = {}

    def read(self) -> None:
        """Take a reading: a job's figure is the most any reading saw (its processes' own
        clocks only grow; one that has ended is no longer seen)."""
        now: defaultdict[str, float] = defaultdict(float)
        for agent in self._daemon.children():
            try:
                job = agent.environ().get("STOKER_JOB_ID")
                if job is None:
                    continue
                own = agent.cpu_times()
                descendants = agent.children(recursive=True)
            except psutil.Error:  # ended between the listing and the reading
                continue
            now[job] += own.user + own.system + own.children_user + own.children_system
            for process in descendants:
                try:
                    times = process.cpu_times()
                except psutil.Error:  # reaped since: its seconds are in its parent's now
                    continue
                now[job] += times.user + times.system
        for job, seconds in now.items():
            self.seconds[job] = max(self.seconds.get(job, 0.0), seconds)
