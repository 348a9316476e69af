"""`Idempotency-Key` for the API's writes (docs/api.md#idempotency).

A write route that honours the header builds a `Once` with `once_for(...)` and hands it
to its service, which claims the key, writes and records the response in one
transaction (`achilles.services.idempotency`); the route wraps the call in `replayable`.
Then:
- a retry with the same key and the same request gets the first response again (same
  status, body and headers, plus `Idempotent-Replayed: true`) and writes nothing;
- the same key with a different request (method, path, body, or preconditions such as
  `If-Match`) is `422`, nothing written;
- two requests with one key at once — two threads, two replicas — are one write: the
  second waits for the first's transaction and replays its response.
Keys are the caller's own (two people's equal keys never meet), 1-255 visible ASCII
characters, and remembered for `KEY_TTL` (24 hours); a request without the header is
simply not deduplicated. Only a write (2xx) is remembered: a request refused before or by
the write (malformed, not found, a stale If-Match, the chat rule) leaves nothing behind,
and its retry is judged afresh.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from achilles.api.identity.caller import Caller
from achilles.api.problems import PROBLEM_MEDIA_TYPE, Problem
from achilles.services.idempotency import (
    KEY_TTL,
    IdempotencyKeyReused,
    IdempotentRequest,
    Once,
    Replayed,
    StoredResponse,
)

T = TypeVar("T")

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")

__all__ = ["HEADER", "KEY_TTL", "once_for", "replayable", "response_of", "stored_json"]


def once_for(
    caller: Caller,
    request: Request,
    key: str | None,
    render: Callable[[T], StoredResponse],
    *,
    body: Any,
    preconditions: Mapping[str, str] | None = None,
) -> Once[T] | None:
    """The `Once` of a write whose request carried `Idempotency-Key: key` (None: no
    header). `body` is the parsed request body (its JSON decides the fingerprint, not
    its spelling); `preconditions` are the headers the write depends on (`If-Match`)."""
    if key is None:
        return None
    if not _KEY.match(key):
        raise Problem(400, f"{HEADER} must be 1 to 255 visible ASCII characters (e.g. a UUID)")
    fingerprint = hashlib.sha256(
        json.dumps(
            {
                "method": request.method,
                "path": request.url.path,
                "body": body,
                "preconditions": dict(preconditions or {}),
            },
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
    ).hexdigest()
    return Once(IdempotentRequest(caller.user_key, key, fingerprint), render)


def stored_json(
    status: int, body: Any, *, headers: Mapping[str, str] | None = None, problem: bool = False
) -> StoredResponse:
    """A JSON response as the idempotency store keeps it."""
    media = PROBLEM_MEDIA_TYPE if problem else "application/json"
    return StoredResponse(status, body, {**(headers or {}), "content-type": media})


def response_of(stored: StoredResponse, *, replayed: bool = False) -> Response:
    headers = {k: v for k, v in stored.headers.items() if k.lower() != "content-type"}
    if replayed:
        headers[REPLAYED_HEADER] = "true"
    media = stored.headers.get("content-type", "application/json")
    return JSONResponse(stored.body, status_code=stored.status, headers=headers, media_type=media)


def replayable(call: Callable[[], Response]) -> Response:
    """Run a write that may be a retry: a used key answers with its first response."""
    try:
        return call()
    except Replayed as replay:
        return response_of(replay.response, replayed=True)
    except IdempotencyKeyReused as exc:
        raise Problem(422, str(exc), type_="idempotency-key-reused") from None
