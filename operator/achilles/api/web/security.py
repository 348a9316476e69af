"""The browser's protections around the web inbox: CSRF on writes, and response headers.

The session cookie is SameSite=Lax, which already keeps other sites' forms from
carrying it on a POST; the double-submit CSRF check is the second lock (Lax is not
honoured by every browser, and a sibling subdomain is "same-site"). It applies only to
requests that carry the session cookie, so bearer callers (the portal, curl) need no
token: a request without the cookie has no ambient authority to abuse.

The page's headers keep the untrusted text the page shows (an agent's question) inert
even if escaping failed somewhere: scripts only from this origin, no inline script or
style, no framing, no referrer (the callback URL carries the authorization code).
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette_csrf.middleware import CSRFMiddleware

from achilles.api.problems import TYPE_BASE, problem_response

# Names the page's script knows too (static/inbox.js).
SESSION_COOKIE = "achilles_session"
CSRF_COOKIE = "achilles_csrf"
CSRF_HEADER = "x-csrf-token"

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "form-action 'self'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    )
)
PAGE_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cross-origin-opener-policy": "same-origin",
}
# Paths of the web inbox (pages, sign-in, its static files). The JSON API's own
# responses keep FastAPI's defaults; `/docs` has headers of its own (`api/docs_page.py`).
WEB_PATHS = ("/auth/", "/static/")


def derived_secret(secret: str, purpose: str) -> str:
    """A key for one purpose from the session secret, so no two mechanisms share a key."""
    return hmac.new(secret.encode(), purpose.encode(), hashlib.sha256).hexdigest()


def is_web_path(path: str) -> bool:
    return path == "/" or path.startswith(WEB_PATHS)


class SessionCSRFMiddleware(CSRFMiddleware):
    """starlette-csrf, answering a failed check with a problem document (as every other
    refusal of the API) and handing its cookie only to cookie-holding browsers."""

    def _get_error_response(self, request: Request) -> Response:
        return problem_response(
            403,
            "this request carries the web session cookie but no X-CSRF-Token header"
            f" matching the {CSRF_COOKIE} cookie; nothing was changed",
            type_=f"{TYPE_BASE}csrf",
        )

    async def send(self, message: Message, send: Send, scope: Scope) -> None:
        # A bearer caller (portal, curl) never uses the cookie: don't hand it one.
        headers = dict(scope.get("headers") or [])
        if b"authorization" in headers:
            await send(message)
            return
        await super().send(message, send, scope)


class PageHeadersMiddleware:
    """Adds the page's security headers to the web inbox's responses."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_web_path(scope["path"]):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in PAGE_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)
