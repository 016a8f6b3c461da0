"""The daemon's state on disk: SQLite in WAL mode at `<state dir>/stoker.db` (DESIGN.md,
"Persistence").

Jobs, their append-only events and the allocation plans. Every write commits before it
returns, so a REST reply never acknowledges what a crash could lose. SQL is parameterised;
JSON columns hold what the REST layer shows; a job's `reason` column holds why it is in
its state, typed as the core said it (JSON of a `JobReason`, never words: `reasons.py`).
One connection, used by the daemon's one writer task only (STYLE.md, "One writer").
`Store` is the one entry point.

- `store.py`: `Store`, which opens the file and hands each call on to the modules below
- `schema.py`: the tables, the migrations from older versions, opening a file safely
- `records.py`: `JobRecord` and `EventRecord`, the rows handed out
- `reasons.py`: a job's reason as its row keeps it (`JobReason`), and its words
- `jobs.py`: the jobs table (submits, lifecycle changes, the queries)
- `events.py`: the event log and the plans
- `models.py`: the throughput model's samples and fits
"""

from daemon.store.reasons import JobReason, reason_words
from daemon.store.records import EventRecord, JobRecord
from daemon.store.schema import SCHEMA_VERSION
from daemon.store.store import StateLost, Store

__all__ = [
    "SCHEMA_VERSION",
    "EventRecord",
    "JobReason",
    "JobRecord",
    "StateLost",
    "Store",
    "reason_words",
]
