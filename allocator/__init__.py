"""Allocation policies: pure functions from one AllocationRequest to one AllocationPlan.

No sockets, files, threads or clocks here; only the standard library and numpy.
"""

from allocator.contention import ContentionCurve
from allocator.errors import AllocatorError, InvalidRequest, UnknownPolicy
from allocator.model import ThroughputModel
from allocator.registry import POLICIES, allocate, get_policy
from allocator.types import AllocationPlan, AllocationRequest, JobAllocation, JobSpec, NodeSpec

__all__ = [
    "POLICIES",
    "AllocationPlan",
    "AllocationRequest",
    "AllocatorError",
    "ContentionCurve",
    "InvalidRequest",
    "JobAllocation",
    "JobSpec",
    "NodeSpec",
    "ThroughputModel",
    "UnknownPolicy",
    "allocate",
    "get_policy",
]
