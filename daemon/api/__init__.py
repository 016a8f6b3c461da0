"""The REST API under /v1 (DESIGN.md, "Interfaces users touch"). `create_app(config)` builds
the app; its lifespan starts the service (store, agent link, the one writer) and stops it.

Every route needs a token (`daemon/auth.py`: `Authorization: Bearer <token>`, or for reads
the dashboard's cookie) but /healthz, the API's description (/docs, /openapi.json) and the
dashboard's page. A tenant sees and cancels only its own jobs (another tenant's job is a
404, as if it did not exist); `admin` sees all. The dashboard's page and its data are
`daemon/dashboard.py`, a job's logs and metrics `daemon/joblogs.py`.

- `app.py`: the factory, its lifespan, the latency middleware, /healthz and /metrics
- `jobs.py`: /v1/jobs: submit, resume, list, read, events, cancel
- `node.py`: /v1/allocations, /v1/events (and their stream), /v1/tpm, /v1/node
- `views.py`: a job as the API shows it (`JobView`)
- `problems.py`: the 422 bodies, and how the OpenAPI document describes them
"""

from daemon.api.app import DEFAULT_TPM, create_app, load_model
from daemon.api.jobs import submit_under_a_free_id

__all__ = ["DEFAULT_TPM", "create_app", "load_model", "submit_under_a_free_id"]
