"""Saying the jobs whose reported numbers a plan refused (scheduler/guard.py): a warning in
the daemon's log and a `refused` event in the job's own, which `stoker events` and the
API show. The job runs on, planned on its prior (issue 37, finding 1)."""

import logging
import time

from daemon.store import Store
from daemon.wording import curve_refused_words
from scheduler.scheduler import Scheduler

log = logging.getLogger(__name__)

REFUSED_EVENT = "refused"


def say_refused(scheduler: Scheduler, store: Store) -> None:
    """Say, and forget, each refusal the core made since the last call."""
    refused, scheduler.refused = scheduler.refused, []
    for refusal in refused:
        why = curve_refused_words(refusal)
        log.warning("job %s: %s", refusal.job_id, why)
        store.add_event(refusal.job_id, time.time(), REFUSED_EVENT, {"why": why})
