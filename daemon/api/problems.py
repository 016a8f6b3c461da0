"""How the API says a request is wrong: a 422 whose `detail` lists problems, each a field
and a message with the fix. `invalid` answers the bodies pydantic refuses, `unprocessable`
builds the same shape for what a route refuses itself, and `describe_problems` makes the
OpenAPI document advertise that shape instead of FastAPI's own loc/msg/type.
"""

from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from daemon.schemas import JobSubmission, request_problem

# What a 422's `detail` lists: the shape `invalid` and `unprocessable` answer, not
# FastAPI's own loc/msg/type, which the schema would otherwise advertise.
PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "type": "object",
    "required": ["field", "message"],
    "properties": {
        "field": {"type": "string", "description": "the request field at fault, dotted"},
        "message": {"type": "string", "description": "what is wrong with it, and the fix"},
    },
}


async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
    """The 422 for a request pydantic refused, one problem per error."""
    # A job body's fields are what a user types by hand (a job TOML): a misspelt one is
    # told its likely name.
    submit = request.method == "POST" and request.url.path.rstrip("/") == "/v1/jobs"
    fields = tuple(JobSubmission.model_fields) if submit else ()
    problems = [
        request_problem(tuple(item["loc"]), item["type"], item["msg"], fields, item.get("input"))
        for item in error.errors()
    ]
    return JSONResponse({"detail": problems}, status_code=422)


def describe_problems(app: FastAPI) -> None:
    """Make the OpenAPI schema describe the 422 bodies this API sends."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()
        schemas = schema.get("components", {}).get("schemas", {})
        if "ValidationError" in schemas:
            schemas["ValidationError"] = PROBLEM_SCHEMA
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def unprocessable(field: str, message: str) -> HTTPException:
    return HTTPException(422, [{"field": field, "message": message}])
