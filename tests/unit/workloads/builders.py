"""Small workloads for simulator tests, built like the domain reads."""

from typing import Any

from workloads.spec import Workload, parse_workload


def job(job_id: str, **fields: Any) -> dict[str, Any]:
    """A one-GPU ResNet-18 job at t=0 unless told otherwise."""
    base: dict[str, Any] = {
        "id": job_id,
        "model": "Resnet18",
        "batch_size": 64,
        "gpus": 1,
        "iterations": 200,
    }
    return {**base, **fields}


def workload(*jobs: dict[str, Any], **tables: Any) -> Workload:
    data: dict[str, Any] = {"name": "test", "jobs": list(jobs)}
    data.update(tables)
    return parse_workload(data, "test workload")
