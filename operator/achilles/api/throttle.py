"""Rate limits of the HTTP API (issue 37): per person, per client address, and of the
failed sign-ins a client may cost us; every refusal a `429` with `Retry-After`.

The counts are the `limits` library's moving windows, in this process's memory: each
replica counts for itself (N replicas let through up to N times a limit, which is still
a bound; a shared store would make every request wait on one). What is counted:

- a person (`ACHILLES_API_RATE_LIMIT_USER`, default 600/minute): every `/v1` request
  once they are recognised, whichever way (token, session, portal acting for them);
- a client address (`ACHILLES_API_RATE_LIMIT_CLIENT`, off by default): every `/v1`
  request, before anything else. The address is the TCP peer's (no header is trusted):
  behind an Ingress every request comes from it, and the portal is one address acting
  for everyone, so it is for an API exposed directly to its clients;
- failed sign-ins of a client address (`ACHILLES_API_AUTH_FAILURE_LIMIT`, default
  30/minute): each `401` counts; once over, a credential that would cost a network call
  to check (a TokenReview, a fetch of the issuer's keys) is refused before that call.
"""

from __future__ import annotations

import math
import time

from limits import RateLimitItem, parse
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter
from starlette.types import ASGIApp, Receive, Scope, Send

from achilles.api.problems import Problem, problem_response

TYPE = "rate-limited"  # under https://achilles.io/problems/


def parse_limit(text: str) -> RateLimitItem | None:
    """`N/second|minute|hour` (the `limits` notation); `0` or empty: no limit."""
    if text.strip() in ("", "0"):
        return None
    return parse(text)


class Throttle:
    def __init__(
        self,
        *,
        per_user: RateLimitItem | None,
        per_client: RateLimitItem | None,
        auth_failures: RateLimitItem | None,
    ) -> None:
        self.per_user = per_user
        self.per_client = per_client
        self.auth_failures = auth_failures
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    def _retry_after(self, item: RateLimitItem, key: str) -> int:
        stats = self._limiter.get_window_stats(item, key)
        return max(1, math.ceil(stats.reset_time - time.time()))

    def _refusal(self, item: RateLimitItem, key: str, what: str) -> Problem:
        retry = self._retry_after(item, key)
        return Problem(
            429,
            f"{what}: at most {item}; try again in {retry} s",
            type_=TYPE,
            headers={"Retry-After": str(retry)},
        )

    def user_request(self, user_key: str) -> None:
        """Count one request of a person; 429 beyond their limit."""
        if self.per_user is not None and not self._limiter.hit(self.per_user, "u", user_key):
            raise self._refusal(self.per_user, "u", "too many requests for this person")

    def client_request(self, client: str) -> Problem | None:
        if self.per_client is None or self._limiter.hit(self.per_client, "c", client):
            return None
        return self._refusal(self.per_client, "c", "too many requests from this address")

    def check_auth_failures(self, client: str) -> None:
        """429 when the client has failed to sign in too often (nothing is counted)."""
        item = self.auth_failures
        if item is not None and not self._limiter.test(item, "f", client):
            raise self._refusal(item, "f", "too many failed sign-ins from this address")

    def auth_failed(self, client: str) -> None:
        if self.auth_failures is not None:
            self._limiter.hit(self.auth_failures, "f", client)


def client_address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


class ClientLimitMiddleware:
    """The per-address limit on `/v1`, before anything reads the request."""

    def __init__(self, app: ASGIApp, throttle: Throttle) -> None:
        self.app = app
        self.throttle = throttle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and str(scope.get("path", "")).startswith("/v1/"):
            refused = self.throttle.client_request(client_address(scope))
            if refused is not None:
                response = problem_response(
                    429, refused.detail, type_=refused.type, headers=refused.headers
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
