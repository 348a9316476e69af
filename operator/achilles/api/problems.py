"""Errors as RFC 9457 problem documents (`application/problem+json`), one clear `detail`.

Every error the API answers with goes through here: a router raises `Problem` (or lets an
engine error through: `NotFound` is 404, `InvalidInputError` 400, `StartRefused` 409, an
unreachable database or cluster 503), FastAPI's own HTTP and validation errors are reworded
(a malformed JSON body is 400, a well-formed one that does not fit the schema 422, each
naming the field), and anything else is a bug: 500 with a detail that says so, and one log
line without the traceback (set ACHILLES_DEBUG=1 to log it), never a traceback in the
response.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException

from achilles.errors import (
    AchillesError,
    ClusterUnavailable,
    DatabaseUnavailable,
    InvalidInputError,
    NotFound,
    SchemaError,
    StartRefused,
)

PROBLEM_MEDIA_TYPE = "application/problem+json"
DEBUG_ENV = "ACHILLES_DEBUG"
# Problem types are documented in docs/api.md#errors; `about:blank` means "the status says it".
TYPE_BASE = "https://achilles.io/problems/"

log = logging.getLogger("achilles.api")


class ProblemDocument(BaseModel):
    """RFC 9457's members as this API fills them (OpenAPI shows this for every error)."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int
    detail: str


class Problem(Exception):
    """An error response: raise it from a router or dependency."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        type_: str | None = None,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.type = f"{TYPE_BASE}{type_}" if type_ else "about:blank"
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})


def problem_response(
    status: int,
    detail: str,
    *,
    type_: str = "about:blank",
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": type_,
        "title": _title(status),
        "status": status,
        "detail": " ".join(detail.split()),
        **(extra or {}),
    }
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_MEDIA_TYPE)


def unauthorized(detail: str) -> Problem:
    """401 with the challenge RFC 6750 asks for."""
    return Problem(401, detail, headers={"WWW-Authenticate": 'Bearer realm="achilles"'})


def not_found(what: str) -> Problem:
    """404 for anything missing *or not the caller's*: the two must read the same."""
    return Problem(404, f"{what} not found")


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _engine_error_status(exc: AchillesError) -> int:
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, InvalidInputError):
        return 400
    if isinstance(exc, StartRefused):
        return 409
    if isinstance(exc, DatabaseUnavailable | ClusterUnavailable | SchemaError):
        return 503
    return 500


RETRY_SOON = {"Retry-After": "5"}


def unavailable_detail(exc: AchillesError) -> str:
    """A 503's `detail`: what is unavailable, in words of our own."""
    if isinstance(exc, ClusterUnavailable):
        return "the cluster's API server cannot be reached right now; try again shortly"
    if isinstance(exc, SchemaError):
        return "the database's schema is not this release's; an operator must migrate it"
    return "the database cannot be reached right now; try again shortly"


def _field(location: Sequence[Any]) -> str:
    """`('query', 'limit')` -> `limit`; `('body', 'reply', 0)` -> `reply[0]`."""
    parts = [str(part) for part in location]
    if parts and parts[0] in ("query", "path", "header", "body", "cookie"):
        where, parts = parts[0], parts[1:]
        if not parts:
            return "request body" if where == "body" else where
    text = ""
    for part in parts:
        text += f"[{part}]" if part.isdigit() and text else (f".{part}" if text else part)
    return text


def validation_detail(exc: RequestValidationError) -> tuple[int, str]:
    """The status (400 for JSON that does not parse, else 422) and one line naming the
    first field at fault."""
    errors = list(exc.errors())
    if not errors:
        return 422, "the request is not valid"
    first = errors[0]
    kind = str(first.get("type", ""))
    if kind == "json_invalid":
        reason = (first.get("ctx") or {}).get("error", "not valid JSON")
        return 400, f"the request body is not valid JSON: {reason}"
    field = _field(first.get("loc", ()))
    message = str(first.get("msg", "is not valid")).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        message = "unknown field"
    elif kind == "missing":
        message = "required"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return 422, f"{field}: {message}{more}"


def install_problem_handlers(app: FastAPI) -> None:
    """Route every error the app can raise through `problem_response`."""

    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Problem)
        return problem_response(
            exc.status, exc.detail, type_=exc.type, headers=exc.headers, extra=exc.extra
        )

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        detail = exc.detail if isinstance(exc.detail, str) else _title(exc.status_code)
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no such path: {request.url.path}"
        elif exc.status_code == 405:
            detail = f"{request.method} is not allowed on {request.url.path}"
        elif exc.status_code == 400 and detail == "There was an error parsing the body":
            detail = "the request body is not valid JSON (or not UTF-8 text)"
        elif exc.status_code == 413:
            detail = "the request body is too large"
        return problem_response(exc.status_code, detail, headers=exc.headers)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        status, detail = validation_detail(exc)
        return problem_response(status, detail)

    async def on_engine_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, AchillesError)
        status = _engine_error_status(exc)
        if status == 500:
            return await on_unexpected(request, exc)
        if status == 503:
            # The driver's text (libpq's host and user, urllib3's URL) is the log's, never
            # the caller's: a 503 says which service is down and nothing of its address.
            log.warning("%s %s: %s", request.method, request.url.path, _one_line(exc))
            return problem_response(503, unavailable_detail(exc), headers=RETRY_SOON)
        return problem_response(status, str(exc))

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error(
            "%s %s: internal error (%s: %s)",
            request.method,
            request.url.path,
            type(exc).__name__,
            _one_line(exc),
            exc_info=exc if os.environ.get(DEBUG_ENV) else None,
        )
        return problem_response(
            500, "internal error; this is a bug, the server's log has one line about it"
        )

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(AchillesError, on_engine_error)
    app.add_exception_handler(Exception, on_unexpected)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


# What every route may answer with, for OpenAPI.
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ProblemDocument, "content": {PROBLEM_MEDIA_TYPE: {}}, "description": text}
    for status, text in {
        400: "Malformed request",
        401: "No valid credentials",
        404: "Not found, or not the caller's",
        413: "Request body too large",
        422: "Request does not fit the schema",
    }.items()
}
