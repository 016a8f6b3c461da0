"""Prometheus metrics for /metrics (prometheus_client), one registry per app.

Per-job gauges are read from a snapshot of the node at scrape time, so a finished job's
series go away with it; counters come from the snapshot's counts; the pause-gap, plan-time
and REST latency histograms are observed as things happen. docs/grafana-dashboard.json charts them.
"""

from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from daemon.snapshot import NodeSnapshot

PAUSE_GAP_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)
PLAN_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """The registry and the histograms others observe into."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.pause_gap = Histogram(
            "stoker_pause_gap_seconds",
            "Pause received to first step with the new allocation, as agents measure it",
            buckets=PAUSE_GAP_BUCKETS,
            registry=self.registry,
        )
        self.plan_time = Histogram(
            "stoker_plan_seconds",
            "Time the policy took to make a plan the core asked for (off the event loop)",
            buckets=PLAN_BUCKETS,
            registry=self.registry,
        )
        self.rest_latency = Histogram(
            "stoker_rest_request_seconds",
            "REST request handling time",
            ["method", "route", "status"],
            registry=self.registry,
        )

    def watch(self, snapshot: Callable[[], NodeSnapshot]) -> None:
        """Read the node from `snapshot()` at every scrape."""
        self.registry.register(_NodeCollector(snapshot))


class _NodeCollector(Collector):
    def __init__(self, snapshot: Callable[[], NodeSnapshot]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        node = self.snapshot()
        labels = ["job", "tenant"]
        workers = GaugeMetricFamily(
            "stoker_job_workers_per_gpu", "Loader workers per GPU", labels=labels
        )
        share = GaugeMetricFamily("stoker_job_decoder_share", "Share of the decoder", labels=labels)
        predicted = GaugeMetricFamily(
            "stoker_job_predicted_samples_per_second", "TPM prediction", labels=labels
        )
        measured = GaugeMetricFamily(
            "stoker_job_measured_samples_per_second", "From heartbeats", labels=labels
        )
        idle = GaugeMetricFamily(
            "stoker_job_idle_fraction", "Share of time waiting for batches", labels=labels
        )
        reported = GaugeMetricFamily(
            "stoker_job_reported",
            "The newest value of each metric the job's script reported with job.report",
            labels=[*labels, "name"],
        )
        for job in node.live():
            for name, value in job.reported.items():
                reported.add_metric([job.id, job.tenant, name], value)
            if job.allocation is None:
                continue
            names = [job.id, job.tenant]
            workers.add_metric(names, job.allocation.workers_per_gpu)
            share.add_metric(names, job.allocation.decoder_share)
            if job.predicted_samples_per_s is not None:
                predicted.add_metric(names, job.predicted_samples_per_s)
            if job.measured_samples_per_s is not None:
                measured.add_metric(names, job.measured_samples_per_s)
            if job.heartbeat is not None:
                idle.add_metric(names, job.heartbeat.idle_fraction)
        yield from (workers, share, predicted, measured, idle, reported)
        counts = node.counts
        for name, value, text in (
            ("plans", counts.plans, "Allocation plans made"),
            ("pauses", counts.pauses, "Pause commands sent"),
            ("resumes", counts.resumes, "Resume commands sent"),
            ("launches", counts.launches, "Agent processes started"),
            ("agent_messages_refused", counts.agent_messages_refused, "Malformed agent messages"),
            ("agent_messages_unroutable", counts.agent_errors, "Messages for unknown jobs"),
        ):
            yield CounterMetricFamily(f"stoker_{name}", text, value=value)
        loader = GaugeMetricFamily(
            "stoker_node_loader_processes", "Loader processes: allocated, allowed", labels=["kind"]
        )
        loader.add_metric(["allocated"], node.loader_processes)
        loader.add_metric(["allowed"], node.cpu_workers)
        yield loader
        waiting = GaugeMetricFamily("stoker_jobs_waiting_for_gpus", "Jobs queued for GPUs")
        waiting.add_metric([], len(node.waiting_for_gpus))
        yield waiting
        yield from _jobs_by_state(node)


def _jobs_by_state(node: NodeSnapshot) -> Iterator[Metric]:
    """Unfinished jobs by state and tenant (what to alert on: a queue that grows, jobs
    pausing for long), and jobs ended since the daemon started by final state and tenant."""
    unfinished: Counter[tuple[str, str]] = Counter()
    ended: Counter[tuple[str, str]] = Counter()
    for job in node.jobs.values():
        (ended if job.state.final else unfinished)[(job.state.value, job.tenant)] += 1
    jobs = GaugeMetricFamily(
        "stoker_jobs", "Unfinished jobs by state and tenant", labels=["state", "tenant"]
    )
    for (state, tenant), count in sorted(unfinished.items()):
        jobs.add_metric([state, tenant], count)
    yield jobs
    done = CounterMetricFamily(
        "stoker_jobs_ended",
        "Jobs that reached a final state since the daemon started",
        labels=["state", "tenant"],
    )
    for (state, tenant), count in sorted(ended.items()):
        done.add_metric([state, tenant], count)
    yield done
