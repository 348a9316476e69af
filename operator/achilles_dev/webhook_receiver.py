"""A real HTTP receiver of the engine's notification webhook, for the tests and the fault
suite: a threaded server on a port of its own that checks each delivery's signature as a
portal would (`achilles.domain.webhook_signature.verify`) and can be told to answer 2xx,
fail with a 5xx, hang, or be down altogether.

Every request is recorded (accepted or not), so a test counts deliveries by delivery id
and sees what a forged or expired request got.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from achilles.domain.webhook_signature import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    SignatureError,
    verify,
)
from achilles_dev.ports import free_port

OK = "ok"
FAIL = "fail"  # 503 with a short body
HANG = "hang"  # hold the request until released (or the server stops)


@dataclass(frozen=True)
class ReceivedRequest:
    delivery_id: str | None
    event: str | None
    status: int  # what the receiver answered
    body: dict[str, Any] | None
    signature_error: str | None
    at: float


@dataclass
class _State:
    mode: str = OK
    requests: list[ReceivedRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    changed: threading.Condition = field(init=False)
    release: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)


class WebhookReceiver:
    """`with WebhookReceiver(secret) as receiver:` serves on 127.0.0.1 (or `host`)."""

    def __init__(
        self,
        secret: bytes,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        tolerance_seconds: int = 300,
    ) -> None:
        self.secret = secret
        self.host = host
        # Outside the ephemeral range: `start` after `stop` gets the same port back.
        self.port = port if port is not None else free_port(host)
        self.tolerance_seconds = tolerance_seconds
        self.state = _State()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Listen (again, on the same port after `stop`: the receiver came back)."""
        self._server = ThreadingHTTPServer((self.host, self.port), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.state.release.clear()
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="webhook-receiver", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Down: the port refuses connections; hanging requests are let go."""
        self.state.release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> WebhookReceiver:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/hooks/achilles"

    def set_mode(self, mode: str) -> None:
        with self.state.lock:
            self.state.mode = mode
            if mode != HANG:
                self.state.release.set()
            else:
                self.state.release.clear()

    # --- what was received -------------------------------------------------------------

    def requests(self) -> list[ReceivedRequest]:
        with self.state.lock:
            return list(self.state.requests)

    def accepted(self) -> list[ReceivedRequest]:
        return [r for r in self.requests() if 200 <= r.status < 300]

    def wait_for_requests(self, count: int, timeout: float) -> list[ReceivedRequest]:
        """At least `count` requests recorded (any answer), or TimeoutError."""
        deadline = time.monotonic() + timeout
        with self.state.changed:
            while len(self.state.requests) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"{len(self.state.requests)} of {count} webhook requests in {timeout} s"
                    )
                self.state.changed.wait(left)
            return list(self.state.requests)

    # --- serving -----------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: the tests read `requests()`

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                with receiver.state.lock:
                    mode = receiver.state.mode
                if mode == HANG:
                    receiver.state.release.wait()
                    return  # the client gave up; answer nothing
                problem: str | None = None
                try:
                    verify(
                        receiver.secret,
                        self.headers.get(TIMESTAMP_HEADER),
                        self.headers.get(SIGNATURE_HEADER),
                        raw,
                        now=time.time(),
                        tolerance_seconds=receiver.tolerance_seconds,
                    )
                except SignatureError as exc:
                    problem = str(exc)
                if problem is not None:
                    status = 401
                elif mode == FAIL:
                    status = 503
                else:
                    status = 204
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                record = ReceivedRequest(
                    delivery_id=self.headers.get(DELIVERY_HEADER),
                    event=self.headers.get(EVENT_HEADER),
                    status=status,
                    body=body if isinstance(body, dict) else None,
                    signature_error=problem,
                    at=time.time(),
                )
                with receiver.state.changed:
                    receiver.state.requests.append(record)
                    receiver.state.changed.notify_all()
                payload = (problem or ("unavailable" if status == 503 else "")).encode()
                self.send_response(status)
                if payload:
                    self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if payload:
                    self.wfile.write(payload)

        return Handler
