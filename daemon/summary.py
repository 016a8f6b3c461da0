"""The node in a few numbers, as `/v1/node` and the dashboard show it."""

from typing import Any

from allocator import ContentionCurve
from daemon.snapshot import NodeSnapshot


def node_summary(node: NodeSnapshot) -> dict[str, Any]:
    """The node as `/v1/node` and the dashboard show it."""
    return {
        "gpus": node.slots if node.uses_gpus else 0,
        "cpu_training_slots": 0 if node.uses_gpus else node.slots,
        "cpu_workers": node.cpu_workers,
        "loader_processes_allocated": node.loader_processes,
        "policy": node.policy,
        "agent_mode": node.agent_mode,
        "jobs_waiting_for_gpus": len(node.waiting_for_gpus),
        "agent_messages_refused": node.counts.agent_messages_refused,
        "warnings": list(node.warnings),
        "contention": {
            "points": [list(point) for point in node.contention],
            "learned_from_jobs": node.contention_learned,
            "efficiency_now": ContentionCurve(node.contention).efficiency(node.loader_processes),
        },
    }
