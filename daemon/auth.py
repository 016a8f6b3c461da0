"""Who is asking: tokens, tenants, and the dependencies every route uses.

A request carries its token as `Authorization: Bearer <token>`. The dashboard's page
carries it in the HttpOnly cookie `stoker_token` instead, which it got by exchanging a
`/?token=...` link (`daemon/dashboard.py`); the cookie is accepted for reads only (GET and
HEAD), so a page on another site cannot make a browser cancel or submit jobs with it.
Tokens map to tenants in the config; with none configured, the first start writes an admin
token to `<state dir>/admin.token` (mode 0600), which a later start with tokens removes.

A token in a query string (the link's `?token=`) never reaches a log: the access log's
lines carry `token=[redacted]` instead (`RedactTokens`).
"""

import hmac
import logging
import os
import re
import secrets
from pathlib import Path
from typing import Annotated
from urllib.parse import unquote_plus

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from daemon.config import DaemonConfig
from daemon.service import Service
from daemon.store import JobRecord
from daemon.tenants import ADMIN

log = logging.getLogger(__name__)

COOKIE = "stoker_token"
_READS = frozenset({"GET", "HEAD"})
ACCESS_LOG = "uvicorn.access"
# A query's fields: a name (up to `=`) and its value, after `?`, `&` or `;`.
_QUERY_FIELD = re.compile(r"(?P<lead>^|[?&;])(?P<name>[^=&;#\s?]*)=(?P<value>[^&;#\s]*)")


def _redact(text: str) -> str:
    """`text` with the value of every query field named `token` `[redacted]`, however its
    name is written: `token`, `TOKEN`, `%74oken`, `to+ken` are all one to a decoder
    (issue 37, finding 10: `?%74oken=` went to the log as it came)."""

    def field(found: re.Match[str]) -> str:
        name = unquote_plus(found["name"]).strip().lower()
        if name != "token":
            return found[0]
        return f"{found['lead']}{found['name']}=[redacted]"

    return _QUERY_FIELD.sub(field, text)


class RedactTokens(logging.Filter):
    """Rewrites a record's `token=` query values to `[redacted]`: in its arguments (uvicorn
    logs the request's path and query as one) and in a message given without them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                _redact(arg) if isinstance(arg, str) else arg for arg in record.args
            )
        elif isinstance(record.msg, str) and not record.args:
            record.msg = _redact(record.msg)
        return True


def redact_tokens_in_access_log() -> None:
    """Install `RedactTokens` on the access log, once (call it after uvicorn set its
    logging up: a dictConfig may replace the logger's filters)."""
    access = logging.getLogger(ACCESS_LOG)
    if not any(isinstance(existing, RedactTokens) for existing in access.filters):
        access.addFilter(RedactTokens())


def tenant_of(tokens: dict[str, str], token: str) -> str | None:
    """The tenant `token` belongs to, compared in constant time; None if none."""
    if not token:
        return None
    for name, known in tokens.items():
        if hmac.compare_digest(token.encode(), known.encode()):
            return name
    return None


# Declares the bearer token in the OpenAPI schema (Swagger's "Authorize" sends it); the
# header itself is read by `_tenant`, which also takes the dashboard's cookie.
_BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="token",
    description="a tenant's token: `tokens` in the config, or <state dir>/admin.token",
)


def _tenant(
    request: Request,
    _declared: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)] = None,
) -> str:
    """The tenant whose token the request carries; 401 otherwise."""
    tokens: dict[str, str] = request.app.state.tokens
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and (tenant := tenant_of(tokens, token)) is not None:
        return tenant
    if request.method in _READS:
        tenant = tenant_of(tokens, request.cookies.get(COOKIE, ""))
        if tenant is not None:
            return tenant
    raise HTTPException(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


Who = Annotated[str, Depends(_tenant)]
Daemon = Annotated[Service, Depends(_service)]


def admin_only(who: str) -> None:
    if who != ADMIN:
        raise HTTPException(403, "this needs the admin token")


def load_tokens(config: DaemonConfig) -> dict[str, str]:
    """tenant -> token; with none configured, the admin token in the state dir."""
    path = admin_token_path(config.state_dir)
    if config.tokens:
        if path.exists():  # a start without tokens wrote it: it grants nothing now
            path.unlink()
            log.warning(
                "tokens are configured: %s, from a start without them, grants nothing now"
                " and was removed; the CLI takes a configured token with --token or"
                " STOKER_TOKEN",
                path,
            )
        return dict(config.tokens)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_urlsafe(32) + "\n")
        log.warning("no tokens configured: admin token written to %s", path)
    return {ADMIN: path.read_text().strip()}


def admin_token_path(state_dir: Path) -> Path:
    return state_dir / "admin.token"


def visible_job(service: Service, who: str, job_id: str) -> JobRecord:
    """The job, if `who` may see it; another tenant's job is as absent as a missing one.
    A 404 for a job's name names the ids of `who`'s jobs of that name (an id is the name
    and a suffix), and one for the start of an id the ids it begins."""
    record = service.store.job(job_id)
    if record is not None and who in (ADMIN, record.tenant):
        return record
    tenant = None if who == ADMIN else who
    named = service.store.ids_named(job_id, tenant)
    if named:
        hint = f"; {job_id!r} is the name of {', '.join(named)} (`stoker jobs` lists ids)"
    elif begun := service.store.ids_starting(job_id, tenant):  # an id cut short
        hint = f"; did you mean {' or '.join(begun)}?"
    else:
        hint = ""
    raise HTTPException(404, f"no job {job_id!r}{hint}")
