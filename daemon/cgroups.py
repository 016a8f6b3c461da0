"""Each job's processes in a cgroup (v2) of their own: bounded by `limits.job_max_pids`
(pids.max) and `limits.job_max_memory_bytes` (memory.max), and killed whole on cancel and at
the job's end, including what left its process group (`setsid cmd &`), which a signal to
the group never reaches.

The cgroups are made under the daemon's own (from /proc/self/cgroup, on the cgroup2 mount
that /proc/self/mountinfo names), in `stoker-<digest of the state dir>/<job id>`: a
restarted daemon finds the cgroups of the jobs it adopts by name. cgroup v2 lets a cgroup
that hands controllers to its children hold no process of its own ("no internal
processes"); where the daemon's cgroup is not the hierarchy's root, the daemon moves itself
into a leaf beside the jobs' folder first. Where no cgroup can be made, or
`limits.job_cgroups = "off"`, a job is its process group alone, and the daemon says why
once at start."""

import contextlib
import errno
import hashlib
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from daemon.limits import Limits

log = logging.getLogger(__name__)

_FALLBACK = (
    "a job is its process group alone: processes that leave it (setsid) outlive a cancel,"
    " and limits.job_max_pids and job_max_memory_bytes are not enforced"
)


def v2_mount(mountinfo: str) -> tuple[Path, str] | None:
    """Where the cgroup2 hierarchy is mounted, and which of its folders the mount shows
    at that place ("/" unless a part of it is bind-mounted); None without one."""
    for line in mountinfo.splitlines():
        before, _, after = line.partition(" - ")
        fields = before.split()
        if after.split()[:1] == ["cgroup2"] and len(fields) >= 5:
            return Path(fields[4]), fields[3]
    return None


def own_cgroup(proc_cgroup: str) -> str | None:
    """The daemon's cgroup in the v2 hierarchy (its `0::` line); None without one."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


@dataclass
class JobCgroups:
    """The jobs' cgroups under `parent`, with the controllers that could be enabled."""

    parent: Path  # <daemon's cgroup>/stoker-<digest>, made while a job's cgroup is in it
    limits: dict[str, str]  # file (pids.max, memory.max) -> value, for each enforced limit
    enabled: str = ""  # what its cgroup.subtree_control is given: "+memory +pids"

    @classmethod
    def start(cls, limits: Limits, state_dir: Path) -> tuple["JobCgroups | None", str]:
        """The jobs' cgroups as `limits` asks, and what the operator should be told ("" when
        all it asks holds)."""
        if limits.job_cgroups == "off":
            return None, f'limits.job_cgroups = "off": {_FALLBACK}'
        try:
            mount = v2_mount(Path("/proc/self/mountinfo").read_text())
            own = own_cgroup(Path("/proc/self/cgroup").read_text())
        except OSError as error:
            return None, f"cgroups unreadable ({error}): {_FALLBACK}"
        if mount is None or own is None:
            return None, f"no cgroup v2 hierarchy is mounted: {_FALLBACK}"
        where, shown = mount
        inside = os.path.relpath(own, shown) if own.startswith(shown) else "."
        home = (where / inside).resolve()
        digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]
        wanted = {
            "pids": ("pids.max", limits.job_max_pids),
            "memory": ("memory.max", limits.job_max_memory_bytes),
        }
        asked = {name: (file, str(value)) for name, (file, value) in wanted.items() if value}
        cgroups = cls(home / f"stoker-{digest}", {})
        try:
            missing = cgroups._enable(home, set(asked), f"stoker-{digest}-daemon")
            cgroups._make_parent()  # whether it may, now: the warning is said at start
        except OSError as error:
            fix = "run it where it may (systemd: Delegate=yes), or set limits.job_cgroups = off"
            return None, (
                f"the daemon may not make cgroups under {home} ({error.strerror}): {_FALLBACK};"
                f" {fix}"
            )
        cgroups.limits = {
            file: value for name, (file, value) in asked.items() if name not in missing
        }
        cgroups.tidy()
        if missing:
            names = ", ".join(sorted(missing))
            settings = " and ".join(
                f"limits.job_max_{'pids' if name == 'pids' else 'memory_bytes'}"
                for name in sorted(missing)
            )
            return cgroups, (
                f"the cgroup v2 hierarchy at {home} offers no {names} controller (on this host"
                f" it may be mounted as cgroup v1): {settings} not enforced; jobs are still"
                " killed whole"
            )
        return cgroups, ""

    def _enable(self, home: Path, asked: set[str], leaf: str) -> set[str]:
        """Enable `asked` for the jobs' cgroups where `home` offers them; those it lacks.
        `home` may not hand a controller on while it holds processes of its own, unless it is
        the hierarchy's root: then the daemon moves into `leaf` and tries again."""
        offered = set((home / "cgroup.controllers").read_text().split())
        enabled = asked & offered
        if enabled:
            change = " ".join(f"+{name}" for name in sorted(enabled))
            try:
                (home / "cgroup.subtree_control").write_text(change)
            except OSError as error:
                if error.errno != errno.EBUSY:
                    raise
                (home / leaf).mkdir(exist_ok=True)
                (home / leaf / "cgroup.procs").write_text(str(os.getpid()))
                log.info("moved the daemon into %s: its cgroup hands controllers on", home / leaf)
                (home / "cgroup.subtree_control").write_text(change)
            self.enabled = change
        return asked - enabled

    def _make_parent(self) -> None:
        try:
            self.parent.mkdir()
        except FileExistsError:
            return
        if self.enabled:
            (self.parent / "cgroup.subtree_control").write_text(self.enabled)

    def path(self, job_id: str) -> Path:
        return self.parent / job_id

    def create(self, job_id: str) -> Path:
        """The job's cgroup, made with its limits (an existing one, of an earlier launch of
        the job, is kept: the launch joins it)."""
        self._make_parent()
        cgroup = self.path(job_id)
        cgroup.mkdir(exist_ok=True)
        for file, value in self.limits.items():
            (cgroup / file).write_text(value)
        return cgroup

    def kill(self, job_id: str) -> None:
        """SIGKILL every process in the job's cgroup, at once (cgroup.kill, Linux 5.14), or
        frozen and killed one by one on older kernels."""
        cgroup = self.path(job_id)
        if not cgroup.is_dir():
            return
        try:
            (cgroup / "cgroup.kill").write_text("1")
            return
        except FileNotFoundError:
            pass
        except OSError as error:
            log.warning("job %s: cgroup.kill: %s", job_id, error)
            return
        freeze = cgroup / "cgroup.freeze"
        with contextlib.suppress(OSError):
            freeze.write_text("1")  # no fork between the read and the kills
        for _ in range(100):
            pids = self.pids(job_id)
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            freeze.write_text("0")  # killed processes leave a frozen cgroup only when thawed

    def pids(self, job_id: str) -> list[int]:
        """The processes in the job's cgroup ([] when it has none, or none is left)."""
        try:
            text = (self.path(job_id) / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(pid) for pid in text.split()]

    def remove(self, job_id: str) -> bool:
        """Remove the job's cgroup once its processes are gone; whether it is gone."""
        try:
            self.path(job_id).rmdir()
        except FileNotFoundError:
            return True
        except OSError:
            return False  # processes dying still in it: the next call
        with contextlib.suppress(OSError):
            self.parent.rmdir()  # the last job's: made again for the next
        return True

    def tidy(self) -> None:
        """Remove the empty cgroups of jobs that ended while no daemon ran; a job's with
        processes in it is kept, for the job a restarted daemon adopts."""
        with contextlib.suppress(OSError):
            for child in self.parent.iterdir():
                if child.is_dir():
                    with contextlib.suppress(OSError):
                        child.rmdir()
        with contextlib.suppress(OSError):
            self.parent.rmdir()
