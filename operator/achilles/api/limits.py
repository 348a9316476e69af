"""A bound on request bodies: larger ones are refused with 413 before they are read whole;
and `/v1` answers that no cache keeps (`NoStoreMiddleware`).

Checked twice: a declared `Content-Length` over the limit is refused before the app runs;
a chunked body is counted as it arrives and refused the moment it passes the limit (the
app's read raises an HTTP 413, which `achilles.api.problems` turns into a problem document).
"""

from __future__ import annotations

from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from achilles.api.problems import problem_response


class BodyTooLarge(HTTPException):
    def __init__(self) -> None:
        super().__init__(status_code=413, detail="the request body is too large")


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            too_large = declared.isdigit()
            detail = (
                f"the request body is too large (at most {self.max_bytes} bytes)"
                if too_large
                else "Content-Length is not a number"
            )
            response = problem_response(413 if too_large else 400, detail)
            await response(scope, receive, send)
            return
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge:
            if started:
                raise
            response = problem_response(
                413, f"the request body is too large (at most {self.max_bytes} bytes)"
            )
            await response(scope, receive, send)


class NoStoreMiddleware:
    """`Cache-Control: no-store` on every `/v1` answer, errors included: they are one
    person's data, and neither a shared proxy nor the browser's disk may keep them."""

    PREFIX = "/v1/"

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(self.PREFIX):
            await self.app(scope, receive, send)
            return

        async def no_store(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["cache-control"] = "no-store"
            await send(message)

        await self.app(scope, receive, no_store)
