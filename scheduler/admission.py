"""Admission: which GPUs (or CPU training slots) a submitted job gets, and when.

A job with `gpu_indices` waits until each of those holds fewer than `max_jobs_per_gpu` jobs;
any other job takes the least loaded ones that do (ties to the lowest index). A job holds
its placement until it ends.

Which job goes next: within a tenant, first come, first served; across tenants, the head
of the tenant furthest below its share, that is with the fewest GPUs placed per unit of its
`weight` (ties: the tenant admitted longest ago, then the head that came first), so that
one tenant's flood of submissions cannot keep another's jobs waiting behind all of it
(issue 17). A tenant at its
`max_running` waits its turn. While the chosen job cannot be placed, every job waits: no
job overtakes it (the paper leaves placement to a resource manager such as Yarn, Sec.
IV-C). With one tenant this is plain first come, first served.
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from scheduler.request import JobRequest


@dataclass(frozen=True)
class TenantShare:
    """A tenant's part of the node: its weight, and how many of its jobs may hold GPUs."""

    weight: float = 1.0
    max_running: int | None = None


@dataclass(frozen=True)
class GpuPool:
    """What admission places jobs on: `slots` GPUs (or CPU training slots), each shared by
    at most `max_jobs_per_gpu` jobs, and how tenants share them (`shares`; a tenant not
    named has weight 1 and no cap)."""

    slots: int
    max_jobs_per_gpu: int = 1
    shares: Mapping[str, TenantShare] = field(default_factory=dict)


@dataclass
class Admission:
    pool: GpuPool
    _queue: list[JobRequest] = field(default_factory=list)
    _placement: dict[str, tuple[int, ...]] = field(default_factory=dict)
    _tenant: dict[str, str] = field(default_factory=dict)  # placed job -> its tenant
    _turns: dict[str, int] = field(default_factory=dict)  # tenant -> its last admission's number

    def enqueue(self, request: JobRequest) -> None:
        self._queue.append(request)

    def hold(self, job_id: str, gpu_indices: tuple[int, ...], tenant: str | None = None) -> None:
        """Count a placement made before (a job adopted after a daemon restart)."""
        self._placement[job_id] = gpu_indices
        if tenant is not None:
            self._tenant[job_id] = tenant

    def withdraw(self, job_id: str) -> bool:
        """Take a waiting job out of the queue; whether it was waiting."""
        for index, request in enumerate(self._queue):
            if request.id == job_id:
                del self._queue[index]
                return True
        return False

    def release(self, job_id: str) -> None:
        self._placement.pop(job_id, None)
        self._tenant.pop(job_id, None)

    def admit(self) -> Iterator[tuple[JobRequest, tuple[int, ...]]]:
        """Place queued jobs, the next one chosen by `_next`, while it fits."""
        while (chosen := self._next()) is not None:
            place = self.place(chosen.gpus, chosen.gpu_indices)
            if place is None:
                return
            self._queue.remove(chosen)
            self._placement[chosen.id] = place
            self._tenant[chosen.id] = chosen.tenant
            self._turns[chosen.tenant] = max(self._turns.values(), default=0) + 1
            yield chosen, place

    def _next(self) -> JobRequest | None:
        """The head of the tenant furthest below its share, among tenants under their
        `max_running` (module docstring); None when none may go."""
        held: dict[str, int] = {}
        running: dict[str, int] = {}
        for job_id, gpus in self._placement.items():
            tenant = self._tenant.get(job_id, "")
            held[tenant] = held.get(tenant, 0) + len(gpus)
            running[tenant] = running.get(tenant, 0) + 1
        best: tuple[float, int, int] | None = None
        chosen: JobRequest | None = None
        seen: set[str] = set()
        for position, request in enumerate(self._queue):
            tenant = request.tenant
            if tenant in seen:
                continue  # only each tenant's head competes
            seen.add(tenant)
            share = self.pool.shares.get(tenant, TenantShare())
            if share.max_running is not None and running.get(tenant, 0) >= share.max_running:
                continue
            # Ties: the tenant served longest ago, then the job that came first.
            rank = (held.get(tenant, 0) / share.weight, self._turns.get(tenant, 0), position)
            if best is None or rank < best:
                best, chosen = rank, request
        return chosen

    def place(self, count: int, pinned: tuple[int, ...] | None) -> tuple[int, ...] | None:
        """Where a job of `count` GPUs would go now; None while it must wait."""
        load = self.load()
        cap = self.pool.max_jobs_per_gpu
        if pinned is not None:
            return tuple(pinned) if all(load[index] < cap for index in pinned) else None
        free = sorted((held, index) for index, held in enumerate(load) if held < cap)
        if len(free) < count:
            return None
        return tuple(sorted(index for _, index in free[:count]))

    def load(self) -> list[int]:
        """Jobs placed on each GPU."""
        load = [0] * self.pool.slots
        for held in self._placement.values():
            for index in held:
                if index < self.pool.slots:  # a restored placement on a node configured smaller
                    load[index] += 1
        return load

    @property
    def waiting(self) -> tuple[str, ...]:
        return tuple(request.id for request in self._queue)

    @property
    def placement(self) -> Mapping[str, tuple[int, ...]]:
        return dict(self._placement)
