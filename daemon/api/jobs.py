"""The job routes under /v1/jobs: submit (with Idempotency-Key replays and a fresh id when
one is taken), resume an ended job, list a page of jobs (cursors in `X-Next-Cursor`), read
one job and its events, cancel one. A tenant sees only its own jobs (`visible_job`); each
job is answered as `views.job_view` builds it.
"""

import base64
import hashlib
import json
import time
from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Header, HTTPException, Query, Request, Response
from pydantic import ValidationError

from allocator import InvalidRequest
from daemon.api.problems import unprocessable
from daemon.api.views import job_view, visible_tenant
from daemon.auth import Daemon, Who, visible_job
from daemon.continuing import resumed_already
from daemon.items import IdTaken, QuotaExceeded, Replayed, SubmitError
from daemon.jobbook import new_job_id
from daemon.ratelimit import SubmitRate
from daemon.schemas import JobSubmission, JobView
from daemon.service import Service
from daemon.store import JobRecord
from scheduler.states import JobState
from tpm import TpmError, UnknownModel

MAX_SEQ = 2**62  # sequence numbers are SQLite integers
DEFAULT_PAGE = 500  # jobs a GET /v1/jobs answers unless told (2,000 were 608 KB at once)
MAX_PAGE = 5000
ID_DRAWS = 5  # a submit whose id is taken draws again this many times at most

router = APIRouter(prefix="/v1")


@router.post("/jobs", status_code=201)
async def submit(
    body: JobSubmission,
    who: Who,
    service: Daemon,
    *,
    request: Request,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            min_length=1,
            max_length=200,
            description="a key of the client's choosing: a retry with the same key and body "
            "answers the job the first made (200, Idempotent-Replayed: true), never a second",
        ),
    ] = None,
) -> JobView:
    """Submit a job; it is committed to the state file before this returns. A tenant may
    submit `limits.submits_per_minute` a minute (a 429 with Retry-After past it); a retry
    that an Idempotency-Key answers is not counted."""
    idempotency: tuple[str, str] | None = None
    if idempotency_key is not None:
        canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True)
        idempotency = (idempotency_key, hashlib.sha256(canonical.encode()).hexdigest())
        first = service.store.idempotent(who, idempotency_key)
        if first is not None:
            return _replay(service, response, Replayed(*first), idempotency[1])
    _submits(request).take(who)
    return await _submit(service, _new_record(body, who), response, idempotency)


@router.post("/jobs/{job_id}/resume", status_code=201)
async def resume(
    job_id: str,
    who: Who,
    service: Daemon,
    *,
    request: Request,
    response: Response,
    again: bool = False,
) -> JobView:
    """Submit an ended job again from its newest checkpoint: a new job of the same settings,
    name and tenant that goes on where it stopped (its `continue_from` names the ended
    one). 422, naming `continue_from`, for a job that has not ended or left no checkpoint,
    or (unless `again`) that was resumed already by a job still running or with
    checkpoints of its own."""
    earlier = visible_job(service, who, job_id)
    _submits(request).take(who)  # a submit as any other
    if not again:
        try:
            resumed_already(service.store, service.launcher.jobs_dir, earlier)
        except SubmitError as error:
            raise unprocessable(error.field, error.message) from None
    try:
        body = JobSubmission.model_validate({**earlier.spec, "continue_from": earlier.id})
    except ValidationError as error:  # settings this daemon no longer takes
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise unprocessable(where, f"job {job_id}'s settings: {first['msg']}") from None
    return await _submit(service, _new_record(body, earlier.tenant), response, None)


def _submits(request: Request) -> SubmitRate:
    submits: SubmitRate = request.app.state.submits
    return submits


def _new_record(body: JobSubmission, tenant: str) -> JobRecord:
    now = time.time()
    return JobRecord(
        id=new_job_id(body.name),
        tenant=tenant,
        name=body.name,
        spec=body.model_dump(),
        state="submitted",
        submitted_at=now,
        updated_at=now,
        restarts=0,
        checkpoint="",
        pid=None,
    )


async def _submit(
    service: Service,
    record: JobRecord,
    response: Response,
    idempotency: tuple[str, str] | None,
) -> JobView:
    """Submit `record`; its view, or the HTTP error that names what to change."""
    if not service.accepting:
        raise HTTPException(503, "the daemon is shutting down")
    lost = service.state_lost()
    if lost is not None:  # acknowledged now, it would be gone at the next start
        raise HTTPException(503, lost)
    try:
        record = await submit_under_a_free_id(service, record, idempotency)
    except Replayed as replayed:  # a retry that raced its first submit
        assert idempotency is not None
        return _replay(service, response, replayed, idempotency[1])
    except QuotaExceeded as error:
        raise HTTPException(429, str(error)) from None
    except SubmitError as error:
        raise unprocessable(error.field, error.message) from None
    except UnknownModel as error:
        raise unprocessable("model", error.message) from None
    except InvalidRequest as error:
        raise unprocessable(error.field, error.problem) from None
    except TpmError as error:  # the model cannot predict this job
        raise unprocessable("model", str(error)) from None
    return job_view(service, record)


def _replay(service: Service, response: Response, first: Replayed, digest: str) -> JobView:
    """The job an Idempotency-Key made before, if this retry's body is the same."""
    if first.body_digest != digest:
        raise unprocessable(
            "Idempotency-Key",
            f"was used for another body (job {first.job_id}); a new job needs a new key",
        )
    record = service.store.job(first.job_id)
    assert record is not None  # committed with its key, never deleted
    response.status_code = 200
    response.headers["Idempotent-Replayed"] = "true"
    return job_view(service, record, current=True)


async def submit_under_a_free_id(
    service: Service, record: JobRecord, idempotency: tuple[str, str] | None = None
) -> JobRecord:
    """Submit `record`, drawing a new id while its id is taken; the record submitted."""
    for _ in range(ID_DRAWS):
        try:
            await service.submit(record, idempotency)
            return record
        except IdTaken:
            record = replace(record, id=new_job_id(record.name))
    raise HTTPException(503, f"no free job id in {ID_DRAWS} draws; submit again")


@router.get("/jobs")
async def jobs(
    who: Who,
    service: Daemon,
    request: Request,
    response: Response,
    *,
    after: Annotated[
        str | None, Query(max_length=400, description="the cursor of the page before")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
    state: Annotated[
        list[JobState] | None, Query(description="only jobs in these states (repeat it)")
    ] = None,
    tenant: Annotated[
        str | None, Query(max_length=128, description="only this tenant's jobs (the admin's)")
    ] = None,
    name: Annotated[str | None, Query(max_length=128, description="only jobs of this name")] = None,
) -> list[JobView]:
    """The caller's jobs (the admin's: all), oldest first, `limit` at a time; only those in
    the `state`s, of the `tenant` and of the `name` given. When more follow, the
    `X-Next-Cursor` header holds the cursor to pass as `after`, and `Link` the next page's
    URL (rel="next")."""
    node = service.snapshot()
    visible = visible_tenant(who)
    if tenant is not None and visible is not None and tenant != visible:
        return []  # a tenant sees only its own jobs: another's are none of them
    page = service.store.jobs_page(
        visible if tenant is None else tenant,
        _cursor(after),
        limit + 1,
        states=[given.value for given in state or ()],
        name=name,
    )
    if len(page) > limit:
        page = page[:limit]
        cursor = _encode_cursor(page[-1])
        response.headers["X-Next-Cursor"] = cursor
        following = request.url.include_query_params(after=cursor, limit=limit)
        response.headers["Link"] = f'<{following}>; rel="next"'
    return [job_view(service, record, node, current=True) for record in page]


def _encode_cursor(record: JobRecord) -> str:
    raw = json.dumps([record.submitted_at, record.id]).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _cursor(after: str | None) -> tuple[float, str] | None:
    """The (submitted_at, id) an `after` cursor stands for; a 422 naming it if it is not
    one of ours."""
    if after is None:
        return None
    try:
        at, job_id = json.loads(base64.urlsafe_b64decode(after.encode()))
        return float(at), str(job_id)
    except (ValueError, TypeError):
        raise unprocessable("after", "not a cursor from X-Next-Cursor; leave it out") from None


@router.get("/jobs/{job_id}")
async def job(job_id: str, who: Who, service: Daemon) -> JobView:
    return job_view(service, visible_job(service, who, job_id), current=True)


@router.get("/jobs/{job_id}/events")
async def job_events(
    job_id: str,
    who: Who,
    service: Daemon,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
) -> list[dict[str, Any]]:
    """The job's events with a sequence number above `after`, oldest first, `limit` at a
    time: poll again with the last one's."""
    visible_job(service, who, job_id)
    return [vars(event) for event in service.store.events(job_id, after=after, limit=limit)]


@router.delete("/jobs/{job_id}")
async def cancel(job_id: str, who: Who, service: Daemon) -> JobView:
    """Cancel a job: its agent is told to stop, and killed if it does not within 5 s. A job
    that ended while its processes run on (`exiting`: a script saving after its final
    step) has them stopped, and its GPUs go to the next job."""
    visible_job(service, who, job_id)
    await service.cancel(job_id, who)
    return job_view(service, visible_job(service, who, job_id))
