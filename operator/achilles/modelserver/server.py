"""An offline OpenAI-compatible Chat Completions server driven by a script.

A real HTTP server (stdlib `ThreadingHTTPServer`, one thread per connection),
so the runner's real `openai` client talks to it over real sockets: retries,
timeouts and error bodies behave as with a hosted provider. Endpoints:
`POST /v1/chat/completions` (also `/chat/completions`), `GET /v1/models`,
`GET /healthz`. Streaming is not supported (the runner does not stream).

For tests, `ModelServer` runs in a background thread and records every request
it answered (`recorded()`), so a test can see what the runner sent: the tools
offered, the tool results it fed back. A reply with `hold: NAME` waits, once recorded,
until the test calls `release(NAME)`: what must happen while a call is in flight (a
reaper pass, a signal) happens before the answer, on any machine's load.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from achilles.modelserver.conversation import (
    Conversation,
    RenderedAnswer,
    UnresolvedPlaceholder,
    first_match,
    render_answer,
)
from achilles.modelserver.script import Reply, Script

log = logging.getLogger(__name__)

_COMPLETIONS_PATHS = ("/v1/chat/completions", "/chat/completions")
_MAX_BODY_BYTES = 32 * 1024 * 1024
# How often serve_forever() looks for a shutdown request (the stdlib default is 0.5 s).
_SHUTDOWN_POLL_SECONDS = 0.05


@dataclass(frozen=True)
class RecordedRequest:
    body: dict[str, Any]
    rule: str | None  # the rule that answered; None when none matched
    status: int
    total_tokens: int | None  # the usage reported to the client, if any

    @property
    def conversation(self) -> Conversation:
        return Conversation.from_request(self.body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], script: Script, api_key: str | None) -> None:
        super().__init__(address, _Handler)
        self.script = script
        self.api_key = api_key
        self.lock = threading.Lock()
        self.fired = [0] * len(script.rules)
        self.requests: list[RecordedRequest] = []
        self.serial = 0
        # Set on shutdown so scripted delays end at once.
        self.stopping = threading.Event()
        # Scripted holds by name: set when the test releases them, or at shutdown.
        self.gates: dict[str, threading.Event] = {}

    def gate(self, name: str) -> threading.Event:
        with self.lock:
            gate = self.gates.setdefault(name, threading.Event())
            if self.stopping.is_set():
                gate.set()
            return gate

    def open_every_gate(self) -> None:
        with self.lock:
            for gate in self.gates.values():
                gate.set()

    def choose(self, conversation: Conversation) -> tuple[int | None, int]:
        """Pick a rule and count its firing, atomically; also a response serial number."""
        with self.lock:
            self.serial += 1
            index = first_match(self.script, conversation, self.fired)
            if index is not None:
                self.fired[index] += 1
            return index, self.serial

    def record(self, request: RecordedRequest) -> None:
        with self.lock:
            self.requests.append(request)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)

    def _authorised(self) -> bool:
        """With an API key, every API route needs it (only /healthz, the probe, is open)."""
        if self.server.api_key is None:
            return True
        if self.headers.get("Authorization") == f"Bearer {self.server.api_key}":
            return True
        self._send_error(HTTPStatus.UNAUTHORIZED, "invalid API key", "invalid_api_key")
        return False

    def do_GET(self) -> None:
        if self.path in ("/v1/models", "/models"):
            if not self._authorised():
                return
            self._send_json(
                HTTPStatus.OK,
                {
                    "object": "list",
                    "data": [{"id": "scripted", "object": "model", "owned_by": "achilles"}],
                },
            )
        elif self.path == "/healthz":
            self._send_json(HTTPStatus.OK, {"status": "ok"})
        else:
            self._send_error(HTTPStatus.NOT_FOUND, f"no route {self.path}", "invalid_request_error")

    def do_POST(self) -> None:
        if self.path not in _COMPLETIONS_PATHS:
            self._send_error(HTTPStatus.NOT_FOUND, f"no route {self.path}", "invalid_request_error")
            return
        if not self._authorised():
            return
        body = self._read_json()
        if body is None:
            return
        if body.get("stream"):
            self._send_error(
                HTTPStatus.BAD_REQUEST, "streaming is not supported", "invalid_request_error"
            )
            return
        conversation = Conversation.from_request(body)
        index, serial = self.server.choose(conversation)
        if index is None:
            self.server.record(RecordedRequest(body, None, 422, None))
            self._send_error(
                HTTPStatus.UNPROCESSABLE_ENTITY,
                f"model script: no rule matches this conversation ({len(conversation.messages)} "
                f"messages, turn {conversation.turn}, last role {conversation.last.get('role')!r}"
                f", last tool {conversation.last_tool!r})",
                "script_error",
            )
            return
        rule = self.server.script.rules[index]
        label = rule.label(index)
        self._answer(rule.reply, label, conversation, body, serial)

    def _answer(
        self,
        reply: Reply,
        label: str,
        conversation: Conversation,
        body: dict[str, Any],
        serial: int,
    ) -> None:
        # Decide and record first, then wait out any scripted delay: a test sees the
        # request as soon as it arrives, even if the client gives up waiting.
        if reply.error is not None:
            self.server.record(RecordedRequest(body, label, reply.error.status, None))
            self._delay(reply)
            headers = {}
            if reply.error.retry_after_ms is not None:
                headers["retry-after-ms"] = str(reply.error.retry_after_ms)
            self._send_error(
                HTTPStatus(reply.error.status), reply.error.message, reply.error.type, headers
            )
            return
        try:
            answer = render_answer(reply, conversation)
        except UnresolvedPlaceholder as exc:
            self.server.record(RecordedRequest(body, label, 422, None))
            self._send_error(
                HTTPStatus.UNPROCESSABLE_ENTITY,
                f"model script rule {label!r}: {exc}",
                "script_error",
            )
            return
        tokens = answer.prompt_tokens + answer.completion_tokens if answer.include_usage else None
        self.server.record(RecordedRequest(body, label, 200, tokens))
        self._delay(reply)
        self._send_json(HTTPStatus.OK, _completion(answer, str(body.get("model", "")), serial))

    def _delay(self, reply: Reply) -> None:
        if reply.hold is not None:
            self.server.gate(reply.hold).wait()
        if reply.delay_seconds:
            # A scripted latency, ended early if the server shuts down.
            self.server.stopping.wait(reply.delay_seconds)

    def _read_json(self) -> dict[str, Any] | None:
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 < length <= _MAX_BODY_BYTES:
            self._send_error(
                HTTPStatus.BAD_REQUEST, "missing or bad Content-Length", "invalid_request_error"
            )
            return None
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError:
            self._send_error(
                HTTPStatus.BAD_REQUEST, "the body is not JSON", "invalid_request_error"
            )
            return None
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            self._send_error(
                HTTPStatus.BAD_REQUEST, "the body needs a `messages` list", "invalid_request_error"
            )
            return None
        return body

    def _send_error(
        self,
        status: HTTPStatus,
        message: str,
        error_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        payload = {"error": {"message": message, "type": error_type, "param": None, "code": None}}
        self._send_json(status, payload, headers)

    def _send_json(
        self, status: HTTPStatus, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            log.info("client went away before the response (it timed out?)")


def _completion(answer: RenderedAnswer, model: str, serial: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.content}
    if answer.tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{serial}_{position}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for position, call in enumerate(answer.tool_calls)
        ]
    completion: dict[str, Any] = {
        "id": f"chatcmpl-scripted-{serial}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if answer.tool_calls else "stop",
                "logprobs": None,
            }
        ],
    }
    if answer.include_usage:
        completion["usage"] = {
            "prompt_tokens": answer.prompt_tokens,
            "completion_tokens": answer.completion_tokens,
            "total_tokens": answer.prompt_tokens + answer.completion_tokens,
        }
    return completion


class ModelServer:
    """The server on `host:port` (port 0 = any free port), served from a background thread."""

    def __init__(
        self, script: Script, *, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None
    ) -> None:
        self._server = _Server((host, port), script, api_key)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """What an AgentModel's `baseURL` should be."""
        host = str(self._server.server_address[0])
        return f"http://{host}:{self.port}/v1"

    def start(self) -> ModelServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": _SHUTDOWN_POLL_SECONDS},
            name="model-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread until `stop()` (from another thread) or an interrupt."""
        self._server.serve_forever()

    def release(self, gate: str) -> None:
        """Let the replies held at `gate` be sent, and any later one at once."""
        self._server.gate(gate).set()

    def stop(self) -> None:
        self._server.stopping.set()
        self._server.open_every_gate()
        if self._thread is not None:
            # shutdown() waits for serve_forever() to return: only when it runs.
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()

    def recorded(self) -> list[RecordedRequest]:
        with self._server.lock:
            return list(self._server.requests)

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
