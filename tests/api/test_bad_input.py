"""Bad input to the API's own routes: a 4xx problem document naming what is wrong, no
traceback, nothing written (issue 19's list: malformed JSON, unknown fields, huge
bodies, unicode edge cases, non-integer ids, and every parameter out of its range)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from sqlalchemy import Engine

from tests.api.conftest import ServedApi, Tokens
from tests.api.support import assert_problem, bearer, database_snapshot, make_cr_agent

RUNS = "/v1/agents/team/helper/runs"
JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Bad:
    name: str
    method: str
    path: str
    status: int
    detail: str
    params: dict[str, Any] | None = None
    content: bytes | None = None
    headers: dict[str, str] | None = None


CASES = [
    Bad("malformed JSON", "POST", RUNS, 400, "not valid JSON", content=b'{"a": ', headers=JSON),
    Bad("JSON of the wrong type", "POST", RUNS, 422, "request body", content=b"[1]", headers=JSON),
    Bad("unknown field", "POST", RUNS, 422, "surprise: unknown field",
        content=b'{"surprise": 1}', headers=JSON),
    Bad("invalid UTF-8 body", "POST", RUNS, 400, "not valid JSON",
        content=b'{"a": "\xff\xfe"}', headers=JSON),
    Bad("huge body", "POST", RUNS, 413, "too large", content=b"{" + b" " * 70_000 + b"}",
        headers=JSON),
    Bad("a non-integer run id", "GET", "/v1/runs/abc", 422, "run_id"),
    Bad("a run id of zero", "GET", "/v1/runs/0", 422, "run_id"),
    Bad("a run id past bigint", "GET", "/v1/runs/99999999999999999999", 422, "run_id"),
    Bad("a unicode agent name", "POST", "/v1/agents/team/h%C3%A9lper/runs", 422, "name"),
    Bad("a right-to-left override in a name", "POST", "/v1/agents/team/a%E2%80%AEb/runs",
        422, "name"),
    Bad("a NUL in a namespace", "POST", "/v1/agents/te%00am/helper/runs", 422, "namespace"),
    Bad("a unicode owner", "GET", "/v1/agents", 422, "owner", params={"owner": "алиса"}),
    Bad("a limit of zero", "GET", "/v1/runs", 422, "limit", params={"limit": 0}),
    Bad("a limit too large", "GET", "/v1/runs", 422, "limit", params={"limit": 501}),
    Bad("a limit that is no number", "GET", "/v1/agents", 422, "limit", params={"limit": "ten"}),
    Bad("an unknown state", "GET", "/v1/runs", 422, "state", params={"state": "exploded"}),
    Bad("a time without a zone", "GET", "/v1/runs", 422, "since",
        params={"since": "2026-11-02T09:00:00"}),
    Bad("since after until", "GET", "/v1/runs", 422, "since",
        params={"since": "2026-11-03T00:00:00Z", "until": "2026-11-02T00:00:00Z"}),
    Bad("a garbage cursor", "GET", "/v1/runs", 422, "cursor", params={"cursor": "%%%"}),
    Bad("a cursor of no number", "GET", "/v1/runs", 400, "cursor", params={"cursor": "cnVuczp4"}),
    Bad("a NUL in an agent filter", "GET", "/v1/runs", 422, "agent", params={"agent": "t\x00/x"}),
    Bad("an agent id past bigint", "GET", "/v1/runs", 422, "agent",
        params={"agent": "9" * 30}),
    Bad("a unicode agent filter", "GET", "/v1/runs", 422, "agent", params={"agent": "team/hé"}),
    Bad("a NUL in a request key", "GET", "/v1/runs", 422, "request_key",
        params={"request_key": "a\x00b"}),
    Bad("an agents cursor for runs", "GET", "/v1/runs", 400, "cursor",
        params={"cursor": "YWdlbnRzOjU"}),
    Bad("an idempotency key with a space", "POST", RUNS, 400, "Idempotency-Key",
        headers={"Idempotency-Key": "two words"}),
    Bad("an unknown path", "GET", "/v1/nothing-here", 404, "no such path"),
    Bad("a method the path lacks", "DELETE", "/v1/runs", 405, "DELETE is not allowed"),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_refused_with_a_problem_and_nothing_written(
    case: Bad, api: ServedApi, tokens: Tokens, db: Engine
) -> None:
    make_cr_agent(db, "alice", name="helper")
    before = database_snapshot(db)
    response = httpx.request(
        case.method,
        f"{api.url}{case.path}",
        params=case.params,
        content=case.content,
        headers={**bearer(tokens("alice")), **(case.headers or {})},
        timeout=10,
    )
    assert case.detail in assert_problem(response, case.status)["detail"]
    assert api.requester.requests == []
    assert database_snapshot(db) == before


def _chunks(total: int, size: int = 8192) -> Iterator[bytes]:
    yield b"["
    for _ in range(total // size):
        yield b" " * size
    yield b"]"


def test_a_huge_chunked_body_is_refused_as_it_arrives(
    api: ServedApi, tokens: Tokens, db: Engine
) -> None:
    """No Content-Length to go by: the body is counted while it is read."""
    make_cr_agent(db, "alice", name="helper")
    before = database_snapshot(db)
    response = httpx.post(
        f"{api.url}{RUNS}",
        content=_chunks(1_000_000),
        headers={**bearer(tokens("alice")), **JSON},
        timeout=10,
    )
    assert "too large" in assert_problem(response, 413)["detail"]
    assert api.requester.requests == []
    assert database_snapshot(db) == before


def test_a_malformed_content_length_is_refused(api: ServedApi, tokens: Tokens) -> None:
    """Sent by hand: httpx would not send one."""
    address = urlsplit(api.url)
    with socket.create_connection((address.hostname, address.port), timeout=10) as conn:
        conn.sendall(
            b"POST /v1/agents/team/helper/runs HTTP/1.1\r\nHost: x\r\nContent-Length: lots\r\n\r\n"
        )
        reply = conn.recv(65536).decode("latin-1")
    assert reply.startswith("HTTP/1.1 400"), reply
    assert "Traceback" not in reply


def test_openapi_is_3_1_with_every_path(api: ServedApi) -> None:
    document = httpx.get(f"{api.url}/openapi.json", timeout=10).json()
    assert document["openapi"].startswith("3.1")
    assert {
        "/v1/me",
        "/v1/agents",
        "/v1/agents/{namespace}/{name}/runs",
        "/v1/runs",
        "/v1/runs/{run_id}",
        "/healthz",
        "/readyz",
    } <= set(document["paths"])


def test_probes(api: ServedApi) -> None:
    assert httpx.get(f"{api.url}/healthz", timeout=10).json() == {"status": "ok"}
    assert httpx.get(f"{api.url}/readyz", timeout=10).json() == {"status": "ready"}
