"""The scripted model server over real loopback HTTP, and `achilles.llm.chat` talking to it
with the real `openai` client (no patching: the client's transport is HTTPX2)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from achilles.errors import ModelCallFailed
from achilles.llm.chat import OpenAIChatModel
from achilles.modelserver.script import parse_script
from achilles.modelserver.server import ModelServer
from tests.waiting import wait_for

SCRIPT = {
    "rules": [
        {
            "when": {"contains": "please fail"},
            "reply": {"error": {"status": 429, "message": "slow down", "retry_after_ms": 1}},
        },
        {"when": {"contains": "no usage"}, "reply": {"content": "free", "omit_usage": True}},
        {
            "when": {"turn": 0, "tools_offered": ["lookup"]},
            "reply": {
                "content": "let me look",
                "tool_calls": [{"name": "lookup", "arguments": {"q": "${last_user}"}}],
                "usage": {"prompt_tokens": 9, "completion_tokens": 2},
            },
        },
        {"when": {"last_tool": "lookup"}, "reply": {"content": "found ${last_result:/hit}"}},
    ]
}
LOOKUP_TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer(parse_script(SCRIPT, source="test"), api_key="k") as running:
        yield running


def _model(server: ModelServer, *, api_key: str = "k", retries: int = 0) -> OpenAIChatModel:
    return OpenAIChatModel(
        base_url=server.base_url, api_key=api_key, model="scripted", timeout=10, max_retries=retries
    )


def test_tool_calls_and_usage_round_trip(server: ModelServer) -> None:
    model = _model(server)
    first = model.complete([{"role": "user", "content": "gizmo"}], [LOOKUP_TOOL], timeout=10)
    assert first.content == "let me look"
    assert first.finish_reason == "tool_calls"
    [call] = first.tool_calls
    assert (call.name, json.loads(call.arguments)) == ("lookup", {"q": "gizmo"})
    assert first.usage is not None
    assert (first.usage.prompt_tokens, first.usage.total_tokens) == (9, 11)

    second = model.complete(
        [
            {"role": "user", "content": "gizmo"},
            first.as_message(),
            {"role": "tool", "tool_call_id": call.call_id, "content": '{"hit": "gadget"}'},
        ],
        [LOOKUP_TOOL],
        timeout=10,
    )
    assert (second.content, second.tool_calls, second.finish_reason) == ("found gadget", (), "stop")


def test_a_response_without_usage_is_reported_as_none(server: ModelServer) -> None:
    reply = _model(server).complete([{"role": "user", "content": "no usage"}], [], timeout=10)
    assert (reply.content, reply.usage) == ("free", None)


def test_errors_after_retries_name_the_status_and_the_message(server: ModelServer) -> None:
    with pytest.raises(ModelCallFailed) as failed:
        _model(server, retries=2).complete(
            [{"role": "user", "content": "please fail"}], [], timeout=10
        )
    assert "HTTP 429" in str(failed.value)
    assert "(after 2 retries)" in str(failed.value)
    assert "slow down" in str(failed.value)
    assert [r.status for r in server.recorded()] == [429, 429, 429]


def test_a_wrong_api_key_is_refused(server: ModelServer) -> None:
    with pytest.raises(ModelCallFailed, match="HTTP 401"):
        _model(server, api_key="wrong").complete([{"role": "user", "content": "x"}], [], timeout=10)


def test_an_unreachable_server_is_a_model_failure() -> None:
    server = ModelServer(parse_script(SCRIPT, source="test"))
    url = server.base_url
    server.stop()  # nothing listens on that port any more
    model = OpenAIChatModel(base_url=url, api_key="k", model="m", timeout=5, max_retries=0)
    with pytest.raises(ModelCallFailed, match="unreachable"):
        model.complete([{"role": "user", "content": "x"}], [], timeout=5)


def _post(server: ModelServer, path: str, body: bytes, token: str = "k") -> tuple[int, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.port}{path}",
        data=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("/v1/chat/completions", b"{nope", 400, "the body is not JSON"),
        ("/v1/chat/completions", b'{"model": "m"}', 400, "needs a `messages` list"),
        (
            "/v1/chat/completions",
            b'{"messages": [], "stream": true}',
            400,
            "streaming is not supported",
        ),
        ("/v1/embeddings", b"{}", 404, "no route /v1/embeddings"),
        (
            "/v1/chat/completions",
            b'{"messages": [{"role": "user", "content": "hi"}]}',
            422,
            "no rule matches this conversation",
        ),
    ],
)
def test_bad_requests_get_openai_style_errors(
    server: ModelServer, path: str, body: bytes, status: int, message: str
) -> None:
    code, payload = _post(server, path, body)
    assert code == status
    assert message in payload["error"]["message"]


def _get(server: ModelServer, path: str, token: str | None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_health_and_model_list(server: ModelServer) -> None:
    assert _get(server, "/healthz", None) == (200, {"status": "ok"})
    code, models = _get(server, "/v1/models", "k")
    assert code == 200
    assert "data" in models


@pytest.mark.parametrize("token", [None, "wrong"])
def test_the_api_key_guards_every_api_route(server: ModelServer, token: str | None) -> None:
    """`--api-key` used to leave GET /v1/models open; only the health probe is."""
    for path in ("/v1/models", "/models"):
        code, payload = _get(server, path, token)
        assert (code, payload["error"]["type"]) == (401, "invalid_api_key")
    code, _ = _post(server, "/v1/chat/completions", b"{}", token or "")
    assert code == 401
    assert _get(server, "/healthz", token)[0] == 200


HELD = {
    "rules": [
        {"when": {"contains": "hold me"}, "reply": {"content": "held", "hold": "first"}},
        {"reply": {"content": "straight"}},
    ]
}


def test_a_held_reply_is_sent_only_once_the_test_releases_it() -> None:
    """Recorded at once, answered at `release`: another request meanwhile is answered
    first; a reply held again at a released gate is not held."""
    answered: list[str] = []

    def ask(model: OpenAIChatModel, text: str) -> None:
        reply = model.complete([{"role": "user", "content": text}], [], timeout=30)
        answered.append(str(reply.content))

    with (
        ModelServer(parse_script(HELD, source="test")) as server,
        ThreadPoolExecutor(max_workers=1) as pool,
    ):
        model = _model(server)
        held = pool.submit(ask, model, "hold me")
        wait_for(lambda: server.recorded(), 10, what="the held request recorded")
        ask(model, "go on")
        assert answered == ["straight"]
        server.release("first")
        held.result(timeout=30)
        assert answered == ["straight", "held"]
        ask(model, "hold me")  # the gate stays open
        assert answered == ["straight", "held", "held"]


def test_stopping_the_server_lets_a_held_reply_go() -> None:
    server = ModelServer(parse_script(HELD, source="test")).start()
    with ThreadPoolExecutor(max_workers=1) as pool:
        held = pool.submit(
            lambda: _model(server).complete(
                [{"role": "user", "content": "hold me"}], [], timeout=30
            )
        )
        wait_for(lambda: server.recorded(), 10, what="the held request recorded")
        server.stop()  # never released
        assert held.result(timeout=30).content == "held"
