"""Admission: which GPUs (or CPU training slots) a submitted job gets, and when.

A job with `gpu_indices` waits until each of those holds fewer than `max_jobs_per_gpu` jobs;
any other job takes the least loaded ones that do (ties to the lowest index). While the
job at the head of the queue cannot be placed, it and every job behind it wait: first come,
first served (the paper leaves placement to a resource manager such as Yarn, Sec. IV-C).
A job holds its placement until it ends.
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from scheduler.messages import JobRequest


@dataclass(frozen=True)
class GpuPool:
    """What admission places jobs on: `slots` GPUs (or CPU training slots), each shared by
    at most `max_jobs_per_gpu` jobs."""

    slots: int
    max_jobs_per_gpu: int = 1


@dataclass
class Admission:
    pool: GpuPool
    _queue: list[JobRequest] = field(default_factory=list)
    _placement: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def enqueue(self, request: JobRequest) -> None:
        self._queue.append(request)

    def hold(self, job_id: str, gpu_indices: tuple[int, ...]) -> None:
        """Count a placement made before (a job adopted after a daemon restart)."""
        self._placement[job_id] = gpu_indices

    def withdraw(self, job_id: str) -> bool:
        """Take a waiting job out of the queue; whether it was waiting."""
        for index, request in enumerate(self._queue):
            if request.id == job_id:
                del self._queue[index]
                return True
        return False

    def release(self, job_id: str) -> None:
        self._placement.pop(job_id, None)

    def admit(self) -> Iterator[tuple[JobRequest, tuple[int, ...]]]:
        """Place queued jobs in order while the head fits."""
        while self._queue:
            head = self._queue[0]
            place = self.place(head.gpus, head.gpu_indices)
            if place is None:
                return
            self._queue.pop(0)
            self._placement[head.id] = place
            yield head, place

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
