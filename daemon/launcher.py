"""Starting and stopping agent processes: one per job, or one per rank for a command job,
each job in its own process group, stdout and stderr in `<state dir>/jobs/<id>/` (rank 0's
as stdout.log and stderr.log, rank k's as stdout.rank<k>.log and stderr.rank<k>.log), and
both interleaved in the order they were written in stdall.log (stdall.rank<k>.log): each
rank writes into pipes that its log sink (daemon/logsink.py) copies to the three. Every
process starts through daemon/spawn.py, in the job's cgroup (daemon/cgroups.py) where the
daemon may make one, which is killed whole when the job is stopped or ends."""

import contextlib
import logging
import os
import stat
import subprocess
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import psutil

from daemon.cgroups import JobCgroups
from daemon.jobfiles import NO_SURPRISES, append_to
from daemon.limits import Limits
from daemon.processes import group_alive, stop_group
from daemon.sinks import NO_SINK_MARK, STDOUT_TAG, Sinks, start_sink
from daemon.spawn import spawn
from daemon.tenants import UnixUser

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Exit:
    """How a job's processes ended."""

    job_id: str
    code: int | None  # the first failed rank's, or 0; None: an adopted agent's, not ours to read
    # (rank, exit code) of each rank that failed by itself, lowest rank first; the ranks
    # stopped because of it are not among them
    failures: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class RankProcess:
    """One rank's process of a command job."""

    argv: Sequence[str]
    env: Mapping[str, str]  # the whole environment: nothing of the daemon's is added
    workdir: Path | None = None
    user: UnixUser | None = None  # run as this user (a root daemon); None: as the daemon


class Launcher:
    def __init__(self, jobs_dir: Path, limits: Limits | None = None) -> None:
        """`limits`: the `[limits]` a job's processes keep to (None: their defaults)."""
        self.jobs_dir = jobs_dir
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self._other_ranks: dict[str, list[subprocess.Popen[bytes]]] = {}
        self._adopted: dict[str, int] = {}  # job -> pid of an agent another daemon started
        self._sinks = Sinks()  # a job's exit is told once its log sinks have copied all
        self.cgroups, self.cgroup_warning = JobCgroups.start(limits or Limits(), jobs_dir.parent)
        self._emptying: set[str] = set()  # jobs whose cgroup is removed once it is empty

    def job_dir(self, job_id: str) -> Path:
        path = self.jobs_dir / job_id
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return path

    def hand_over(self, job_id: str, user: UnixUser | None) -> Path:
        """The job's directory, readable by its owner only: the daemon's user, or `user`,
        who then owns it and what it holds (its logs, output and checkpoints). The state
        and jobs directories above stay the daemon's, passable but not listable (0711)."""
        path = self.job_dir(job_id)
        if user is None:
            path.chmod(0o700)
            return path
        for above in (self.jobs_dir, self.jobs_dir.parent):
            above.chmod(above.stat().st_mode & 0o700 | 0o011)
        for sub in ("output", "checkpoints"):
            (path / sub).mkdir(mode=0o700, exist_ok=True)
        os.chown(path, user.uid, user.gid, follow_symlinks=False)
        # Walked by descriptors: a folder the job swaps for a link mid-walk cannot lead a
        # chown out of the job's folder.
        for _, folders, files, folder in os.fwalk(path, follow_symlinks=False):
            for name in (*folders, *files):
                _give(name, folder, user)
        path.chmod(0o700)
        return path

    def launch(self, job_id: str, argv: Sequence[str], env: Mapping[str, str]) -> int:
        """Start the agent with exactly the environment `env` (nothing of the daemon's is
        added: its tokens stay with it); its pid."""
        self.job_dir(job_id)  # made if missing
        cgroup = self._cgroup(job_id)
        try:
            with self._outputs(job_id, 0, {os.geteuid()}, None, env) as (out, err):
                # its own process group: signals reach its workers too
                process = spawn(argv, env, stdout=out, stderr=err, cgroup=cgroup, new_session=True)
        except OSError:
            self._end_cgroup(job_id)
            raise
        self._processes[job_id] = process
        log.info("job %s: agent started, pid %d", job_id, process.pid)
        return process.pid

    def launch_ranks(self, job_id: str, ranks: Sequence[RankProcess]) -> int:
        """Start a command job's ranks in one process group (rank 0 leads it), each with
        exactly the environment given; rank 0's pid."""
        user = ranks[0].user if ranks else None
        self.hand_over(job_id, user)
        # The folder may be the tenant's: a log name there may be a link it planted.
        owners = {os.geteuid(), *([user.uid] if user is not None else [])}
        started: list[subprocess.Popen[bytes]] = []
        try:
            cgroup = self._cgroup(job_id)
            for rank, process in enumerate(ranks):
                with self._outputs(job_id, rank, owners, user, process.env) as (out, err):
                    started.append(
                        spawn(
                            process.argv,
                            process.env,
                            stdout=out,
                            stderr=err,
                            # entered as its user, never as the daemon's (issue 37, 3)
                            workdir=process.workdir,
                            user=process.user,
                            cgroup=cgroup,
                            # One group for all ranks, led by rank 0: a rank can join
                            # a group only in its own session, so no new session here.
                            process_group=started[0].pid if started else 0,
                        )
                    )
        except OSError:
            if started:
                stop_group(started[0].pid, grace_s=0.0)
                for done in started:
                    done.wait()
            self._end_cgroup(job_id)
            raise
        self._processes[job_id] = started[0]
        self._other_ranks[job_id] = started[1:]
        log.info("job %s: %d rank(s) started, pid %d", job_id, len(started), started[0].pid)
        return started[0].pid

    @contextlib.contextmanager
    def _outputs(
        self,
        job_id: str,
        rank: int,
        owners: Collection[int],
        user: UnixUser | None,
        env: Mapping[str, str],
    ) -> Iterator[tuple[int, int]]:
        """Where a rank writes its stdout and stderr: pipes to a log sink of its own, which
        keeps each stream's log and the interleaved one; or, where no sink can start, the
        two logs themselves (the interleaved one says so)."""
        directory = self.jobs_dir / job_id
        with (
            append_to(log_file(directory, "stdout", rank), owners) as out,
            append_to(log_file(directory, "stderr", rank), owners) as err,
            append_to(log_file(directory, "stdall", rank), owners) as both,
        ):
            for opened, tag in ((out, ""), (err, ""), (both, STDOUT_TAG)):
                _own(opened.fileno(), user)
                _mark_start_again(opened, env, tag)
            (out_read, out_write), (err_read, err_write) = os.pipe(), os.pipe()
            done = start_sink((out_read, err_read, out.fileno(), err.fileno(), both.fileno()))
            os.close(out_read)
            os.close(err_read)
            if done is None:
                os.close(out_write)
                os.close(err_write)
                both.write(f"{STDOUT_TAG}{NO_SINK_MARK}\n".encode())
                yield out.fileno(), err.fileno()
                return
            self._sinks.add(job_id, done)
            try:
                yield out_write, err_write
            finally:  # the rank holds them now: the sink reads to their end
                os.close(out_write)
                os.close(err_write)

    def adopt(self, job_id: str, pid: int) -> None:
        """Watch an agent a previous daemon started; its exit code is not ours to read."""
        self._adopted[job_id] = pid

    def exited(self) -> list[Exit]:
        """Every job whose processes all ended since the last call."""
        done: list[Exit] = []
        for job_id, first in list(self._processes.items()):
            codes = self._job_exit(first, self._other_ranks.get(job_id, []))
            if codes is not None and self._sinks.drained(job_id):
                done.append(Exit(job_id, *codes))
        # An adopted job ends with the last process of its group: its rank 0 leads it, and
        # the other ranks may hold its GPUs a while longer.
        done += [
            Exit(job_id, None) for job_id, pid in self._adopted.items() if not group_alive(pid)
        ]
        for job in done:
            self._processes.pop(job.job_id, None)
            self._other_ranks.pop(job.job_id, None)
            self._adopted.pop(job.job_id, None)
            self._end_cgroup(job.job_id)  # what it left running (`setsid cmd &`) ends with it
        self._emptying = {job_id for job_id in self._emptying if not self._removed(job_id)}
        return done

    def _cgroup(self, job_id: str) -> Path | None:
        """The job's cgroup, made for this launch; None where the daemon makes none."""
        if self.cgroups is None:
            return None
        self._emptying.discard(job_id)
        return self.cgroups.create(job_id)

    def _end_cgroup(self, job_id: str) -> None:
        """Kill whatever runs in the job's cgroup; it is removed once empty."""
        if self.cgroups is None:
            return
        self.cgroups.kill(job_id)
        if not self.cgroups.remove(job_id):
            self._emptying.add(job_id)

    def _removed(self, job_id: str) -> bool:
        return self.cgroups is None or self.cgroups.remove(job_id)

    def cgroup_pids(self, job_id: str) -> list[int]:
        """The processes in the job's cgroup ([] without one)."""
        return self.cgroups.pids(job_id) if self.cgroups is not None else []

    @staticmethod
    def _job_exit(
        first: subprocess.Popen[bytes], others: list[subprocess.Popen[bytes]]
    ) -> tuple[int, tuple[tuple[int, int], ...]] | None:
        """A job's exit code (the first failed rank's, or 0) and its failures, once every
        rank ended; None before. A rank that fails takes the others down: they would wait
        for it in their collectives. The failures are the ranks seen failed before that."""
        codes = [process.poll() for process in (first, *others)]
        failures = tuple((rank, code) for rank, code in enumerate(codes) if code not in (None, 0))
        if failures and None in codes:
            stop_group(first.pid, grace_s=2.0)
            codes = [process.wait() for process in (first, *others)]
        if None in codes:
            return None
        return (failures[0][1] if failures else 0), failures

    def pin(self, job_id: str, cpus: Sequence[int]) -> None:
        """Move every thread of the job's processes (its ranks and their loader workers) to
        `cpus`; new threads and workers inherit it. A process that ended meanwhile, or one
        this daemon may not change, is left as it is."""
        roots = [process.pid for process in self._ranks(job_id)]
        if job_id in self._adopted:
            roots.append(self._adopted[job_id])
        for root in roots:
            try:
                tree = psutil.Process(root)
                processes = [tree, *tree.children(recursive=True)]
            except psutil.Error:
                continue
            for process in processes:
                try:
                    threads = [thread.id for thread in process.threads()]
                except psutil.Error:
                    continue
                for thread in threads:
                    try:
                        os.sched_setaffinity(thread, cpus)
                    except OSError as error:  # ended meanwhile, or not ours to move
                        log.debug("job %s: thread %d not pinned: %s", job_id, thread, error)

    def job_ids(self) -> list[str]:
        """The jobs whose processes run (launched or adopted)."""
        return [*self._processes, *self._adopted]

    def _ranks(self, job_id: str) -> list[subprocess.Popen[bytes]]:
        first = self._processes.get(job_id)
        return [] if first is None else [first, *self._other_ranks.get(job_id, [])]

    def running(self, job_id: str) -> bool:
        return job_id in self._processes or job_id in self._adopted

    def stop(self, job_id: str, grace_s: float = 5.0) -> None:
        """SIGTERM the job's process group, SIGKILL after `grace_s`."""
        process = self._processes.pop(job_id, None)
        if process is not None:
            others = self._other_ranks.pop(job_id, [])
            stop_group(process.pid, grace_s, children=[rank.pid for rank in others])
            for started in (process, *others):  # killed by now: the waits are short
                with contextlib.suppress(subprocess.TimeoutExpired):
                    started.wait(timeout=5.0)
        pid = self._adopted.pop(job_id, None)
        if pid is not None:
            stop_group(pid, grace_s)
        self._end_cgroup(job_id)  # and what left its process group

    def stop_all(self, grace_s: float = 5.0, keep: Collection[str] = ()) -> None:
        """Stop every job's processes but those of the jobs in `keep`."""
        for job_id in [*self._processes, *self._adopted]:
            if job_id not in keep:
                self.stop(job_id, grace_s)


def _give(name: str, folder: int, user: UnixUser) -> None:
    """Make `name` in the open `folder` the user's, through a descriptor of what is there
    now: a link stays a link (it is not followed), and a file with another name that is not
    already the user's (a hard link to one of the daemon's) is left as it is."""
    try:
        opened = os.open(name, os.O_RDONLY | NO_SURPRISES, dir_fd=folder)
    except OSError:  # a link (ELOOP), a socket, or gone: never followed, never another's
        with contextlib.suppress(OSError):
            os.chown(name, user.uid, user.gid, dir_fd=folder, follow_symlinks=False)
        return
    try:
        info = os.fstat(opened)
        if stat.S_ISDIR(info.st_mode) or info.st_nlink == 1 or info.st_uid == user.uid:
            os.fchown(opened, user.uid, user.gid)
    finally:
        os.close(opened)


AGAIN_MARK = "----- stoker: started again"
# Set on a log's reply (`GET /v1/jobs/{id}/logs`) when the log holds lines before the tail
# served: `stoker logs` says so.
EARLIER_HEADER = "X-Earlier-Lines"


def _mark_start_again(log_file: BinaryIO, env: Mapping[str, str], tag: str = "") -> None:
    """A line between one process's output and the next's in a log that already holds
    some (a relaunch after a failure, or a cold resize): `stoker logs` shows where each
    began, and a failure's reason reads the last one's alone. `tag`: each line's, in the
    interleaved log."""
    if os.fstat(log_file.fileno()).st_size == 0:
        return
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    restart = env.get("STOKER_ATTEMPT", "0")
    after = f", restart {restart}" if restart != "0" else ""
    log_file.write(f"{tag}\n{tag}{AGAIN_MARK} at {when}{after} -----\n".encode())
    log_file.flush()


def _own(descriptor: int, user: UnixUser | None) -> None:
    """A log, readable by its owner only: the daemon's user, or `user`."""
    os.fchmod(descriptor, 0o600)
    if user is not None:
        os.fchown(descriptor, user.uid, user.gid)


def log_file(job_dir: Path, stream: str, rank: int) -> Path:
    """Where one rank's stdout or stderr goes: `stderr.log` for rank 0, `stderr.rank<k>.log`
    for rank k."""
    return job_dir / (f"{stream}.log" if rank == 0 else f"{stream}.rank{rank}.log")
