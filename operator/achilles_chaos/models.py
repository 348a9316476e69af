"""The models the suite's runs talk to: the product's offline model server with a script of
the suite's own, and a broken endpoint for replies no script can produce.

A run's behaviour is chosen by a marker in its Agent's prompt (`Behaviour.prompt`), so
one model server serves every scenario: a quick answer, a reply held for N seconds (a
long, healthy run), tool calls for tools that do not exist, malformed tool arguments, a
huge answer, an API error, a model that never stops calling tools.

The broken endpoint (`BrokenModel`) is a raw HTTP server on the node's host address that
answers `/<mode>/v1/chat/completions` with what a misbehaving provider sends: a body that
is not JSON, truncated JSON, the wrong shape, absurd or negative token counts, an HTML
error page, a connection closed mid-reply, or a valid reply too big for the runner's
memory limit.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from achilles.errors import LocalStackError

HUGE_CONTENT_BYTES = 2 << 20  # "huge content" from the scripted server: 2 MiB
# A reply the runner cannot hold under the OOM scenario's memory limit.
OOM_REPLY_BYTES = 160 << 20
HOLD_SECONDS = (20, 40, 60, 70, 90)
HOLD_FOREVER = 3000.0


@dataclass(frozen=True)
class Behaviour:
    marker: str
    what: str

    def prompt(self, text: str = "") -> str:
        return f"[chaos:{self.marker}] {text}".strip()


QUICK = Behaviour("quick", "answers at once")
HOLD = Behaviour("hold", f"holds the reply {HOLD_FOREVER:.0f} s (a run that hangs on its model)")
UNKNOWN_TOOL = Behaviour("unknown-tool", "calls a tool that does not exist, then answers")
BAD_ARGUMENTS = Behaviour("bad-arguments", "calls search_knowledge with malformed JSON arguments")
HUGE = Behaviour("huge", f"answers with {HUGE_CONTENT_BYTES >> 20} MiB of text")
EMPTY = Behaviour("empty", "answers with whitespace only")
SERVER_ERROR = Behaviour("server-error", "answers HTTP 500")
LOOPS = Behaviour("loops", "calls a tool at every turn (the iteration cap)")
NO_USAGE = Behaviour("no-usage", "answers without a usage block")


def held(seconds: int) -> Behaviour:
    if seconds not in HOLD_SECONDS:
        raise ValueError(f"no scripted hold of {seconds} s (have {HOLD_SECONDS})")
    return Behaviour(f"hold-{seconds}", f"holds the reply {seconds} s, then answers")


def script() -> dict[str, Any]:
    """The model server's script: one rule (or two) per behaviour, first match wins."""

    def when(behaviour: Behaviour, **more: Any) -> dict[str, Any]:
        return {"contains": f"[chaos:{behaviour.marker}]", **more}

    rules: list[dict[str, Any]] = [
        {"name": "quick", "when": when(QUICK), "reply": {"content": "ok: nothing to report"}},
        {
            "name": "hold",
            "when": when(HOLD),
            "reply": {"content": "held", "delay_seconds": HOLD_FOREVER},
        },
        *(
            {
                "name": f"hold {seconds}",
                "when": when(held(seconds)),
                "reply": {"content": f"held {seconds} s", "delay_seconds": seconds},
            }
            for seconds in HOLD_SECONDS
        ),
        {
            "name": "unknown tool",
            "when": when(UNKNOWN_TOOL, turn=0),
            "reply": {"tool_calls": [{"name": "drop_all_tables", "arguments": {"really": True}}]},
        },
        {
            "name": "bad arguments",
            "when": when(BAD_ARGUMENTS, turn=0),
            "reply": {"tool_calls": [{"name": "search_knowledge", "arguments": '{"query": '}]},
        },
        {
            "name": "loops",
            "when": when(LOOPS),
            "reply": {"tool_calls": [{"name": "search_knowledge", "arguments": {"query": "x"}}]},
        },
        {
            "name": "answer after a tool",
            "when": {"last_role": "tool", "contains": "[chaos:"},
            "reply": {"content": "answered after the tool said: ${last_result}"},
        },
        {"name": "huge", "when": when(HUGE), "reply": {"content": "x" * HUGE_CONTENT_BYTES}},
        {"name": "empty", "when": when(EMPTY), "reply": {"content": "   "}},
        {
            "name": "server error",
            "when": when(SERVER_ERROR),
            "reply": {"error": {"status": 500, "message": "chaos: overloaded"}},
        },
        {
            "name": "no usage",
            "when": when(NO_USAGE),
            "reply": {"content": "no usage reported", "omit_usage": True},
        },
    ]
    return {"rules": rules}


@dataclass
class ModelServer:
    """`achilles model-server` as a process of its own, on an address the pods reach."""

    process: subprocess.Popen[str]
    base_url: str

    @classmethod
    def start(cls, host: str, workdir: Path) -> ModelServer:
        script_path = workdir / "model-script.json"
        script_path.write_text(json.dumps(script()))
        log = (workdir / "model-server.log").open("a")
        process = subprocess.Popen(
            [
                sys.executable, "-m", "achilles", "model-server",
                "--host", host, "--port", "0", "--script", str(script_path),
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )  # fmt: skip
        assert process.stdout is not None
        line = process.stdout.readline()  # blocks until it listens (or exits)
        if "listening on " not in line:
            process.kill()
            raise LocalStackError(f"the model server did not start: {line!r}")
        return cls(process, line.split("listening on ")[1].split()[0])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


# --- the broken endpoint -------------------------------------------------------------------

BROKEN_MODES: dict[str, str] = {
    "not-json": "HTTP 200 with a body that is not JSON",
    "truncated": "HTTP 200 with JSON cut off mid-object",
    "wrong-shape": "HTTP 200 with JSON of the wrong shape (choices is a number)",
    "no-choices": "HTTP 200 with an empty choices list",
    "absurd-tokens": "a valid answer claiming 10^15 tokens",
    "negative-tokens": "a valid answer claiming -5 tokens",
    "html-502": "HTTP 502 with an HTML error page",
    "hang-up": "the connection closed before any reply",
    "oom": f"a valid answer of {OOM_REPLY_BYTES >> 20} MiB",
}


def _completion(content: str, prompt_tokens: int = 10, completion_tokens: int = 5) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-chaos",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "chaos",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    ).encode()


class _BrokenHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        mode = self.path.strip("/").split("/")[0]
        server = self.server
        assert isinstance(server, _BrokenServer)
        with server.lock:
            server.hits[mode] = server.hits.get(mode, 0) + 1
        if mode == "hang-up":
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(2)
            return
        if mode == "oom":
            self._stream_huge()
            return
        status, content_type, body = _broken_reply(mode)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _stream_huge(self) -> None:
        head = b'{"id":"chatcmpl-chaos","object":"chat.completion","created":0,"model":"chaos",'
        head += b'"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant",'
        head += b'"content":"'
        tail = b'"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}'
        chunk = b"y" * (1 << 20)
        chunks = OOM_REPLY_BYTES // len(chunk)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(head) + chunks * len(chunk) + len(tail)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the runner may die reading it: that is the point
            self.wfile.write(head)
            for _ in range(chunks):
                self.wfile.write(chunk)
            self.wfile.write(tail)


def _broken_reply(mode: str) -> tuple[int, str, bytes]:
    if mode == "not-json":
        return 200, "application/json", b"<html><body>definitely not json</body></html>"
    if mode == "truncated":
        return 200, "application/json", _completion("cut")[:40]
    if mode == "wrong-shape":
        return 200, "application/json", b'{"id": "x", "choices": 42, "usage": "lots"}'
    if mode == "no-choices":
        return 200, "application/json", b'{"id": "x", "object": "chat.completion", "choices": []}'
    if mode == "absurd-tokens":
        return 200, "application/json", _completion("absurd", 10**15, 10**15)
    if mode == "negative-tokens":
        return 200, "application/json", _completion("negative", -3, -2)
    if mode == "html-502":
        return 502, "text/html", b"<html><h1>502 Bad Gateway</h1></html>"
    return 404, "text/plain", f"unknown chaos mode {mode!r}".encode()


class _BrokenServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, _BrokenHandler)
        self.lock = threading.Lock()
        self.hits: dict[str, int] = {}


class BrokenModel:
    """The broken provider, in a thread of the suite's process."""

    def __init__(self, host: str) -> None:
        self._server = _BrokenServer((host, 0))
        self.host = host
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="chaos-broken-model", daemon=True
        )
        self._thread.start()

    def base_url(self, mode: str) -> str:
        if mode not in BROKEN_MODES:
            raise ValueError(mode)
        return f"http://{self.host}:{self.port}/{mode}/v1"

    def hits(self, mode: str) -> int:
        with self._server.lock:
            return self._server.hits.get(mode, 0)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
