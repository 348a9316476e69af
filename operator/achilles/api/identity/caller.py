"""The caller of a request, as one FastAPI dependency: `current_caller`.

Order (docs/api.md#authentication):
1. `Authorization: Bearer <token>`. A token whose (unverified) `iss` is the configured
   OIDC issuer is verified as an OIDC access token (`oidc.OidcVerifier`); any other token
   goes to the Kubernetes API server's TokenReview when ServiceAccount tokens are enabled
   (`kubernetes.KubernetesIdentity`). A token either way refuses is 401; there is no
   falling through to a weaker way.
2. The web inbox's session (`request.session["user_key"]`), present only when the web
   helper's SessionMiddleware is installed.
3. Else 401.

No header naming a user is ever trusted (X-Forwarded-User, X-Remote-User, ...):
`Impersonate-User` is honoured only for a ServiceAccount the API server says may
impersonate that user. Whether a caller is an admin (reads every owner's data) is a
SubjectAccessReview too (`kubernetes.KubernetesIdentity.is_admin`); without Kubernetes
reviews configured nobody is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from achilles.api.identity.peek import CLAIMS, HEADER, unverified_part
from achilles.api.problems import Problem, unauthorized

IMPERSONATE_USER = "Impersonate-User"
Via = Literal["oidc", "serviceaccount", "session"]


@dataclass(frozen=True)
class Caller:
    """The person a request acts for. `via` says how they were recognised."""

    user_key: str
    is_admin: bool
    via: Via

    def may_read(self, owner_key: str) -> bool:
        """Owner-scoping in one place: a person reads their own data, an admin anyone's."""
        return self.is_admin or owner_key == self.user_key


class BearerVerifier(Protocol):
    issuer: str

    def user_key_of(self, token: str) -> str:
        """The user key the token names; `Problem` 401 if the token is not valid."""
        ...

    def needs_keys_for(self, token: str) -> bool:
        """Whether verifying the token would fetch the issuer's keys first."""
        ...


class ServiceAccountIdentity(Protocol):
    def user_key_for(self, token: str, impersonate: str | None) -> str:
        """The user key a ServiceAccount token acts for: the `Impersonate-User` it may
        impersonate. 401 for a token the API server does not accept, 403 for an
        impersonation RBAC does not grant or a missing one."""
        ...

    def is_admin(self, user_key: str) -> bool: ...

    def may_write_for_others(self, user_key: str) -> bool:
        """Whether the person may act on other owners' objects (a write grant)."""
        ...

    def cached_admin(self, user_key: str) -> bool | None:
        """`is_admin`'s answer when it is known without asking the API server."""
        ...


@dataclass(frozen=True)
class Authenticator:
    """The configured ways in; `None` for a way that is off."""

    oidc: BearerVerifier | None
    kubernetes: ServiceAccountIdentity | None

    def identify(self, request: Request) -> tuple[str, Via]:
        """The user key the request acts for and how it was recognised; 401/403 if none."""
        found = self._identify(request, may_wait=True)
        assert found is not None
        return found

    def identify_now(self, request: Request) -> tuple[str, Via] | None:
        """`identify` when that is CPU work only; None when it would wait on the network
        (a JWKS fetch, a TokenReview): then call `identify` from a thread."""
        return self._identify(request, may_wait=False)

    def cached_admin(self, user_key: str) -> bool | None:
        """Whether the person is an admin, if known without a call (else None)."""
        return False if self.kubernetes is None else self.kubernetes.cached_admin(user_key)

    def is_admin(self, user_key: str) -> bool:
        return self.kubernetes is not None and self.kubernetes.is_admin(user_key)

    def may_write_for_others(self, user_key: str) -> bool:
        """An admin's write grant (`update` on `ownerdata`): reading every owner's data
        does not let one act on it. Asks the API server (call from a thread)."""
        return self.kubernetes is not None and self.kubernetes.may_write_for_others(user_key)

    def _identify(self, request: Request, *, may_wait: bool) -> tuple[str, Via] | None:
        authorization = request.headers.get("authorization")
        if authorization is not None:
            return self._bearer(request, authorization, may_wait=may_wait)
        if "session" in request.scope:  # read by its middleware already
            user_key = request.session.get("user_key")
            if isinstance(user_key, str) and user_key:
                return user_key, "session"
        raise unauthorized("no credentials: send Authorization: Bearer <token>")

    def _bearer(
        self, request: Request, authorization: str, *, may_wait: bool
    ) -> tuple[str, Via] | None:
        token = _bearer_token(authorization)
        impersonate = request.headers.get(IMPERSONATE_USER)
        if self.oidc is not None and issuer_of(token) == self.oidc.issuer:
            if impersonate is not None:
                raise Problem(
                    403,
                    f"{IMPERSONATE_USER} is honoured only for a Kubernetes ServiceAccount"
                    " that RBAC lets impersonate that user",
                )
            if not may_wait and self.oidc.needs_keys_for(token):
                return None
            return self.oidc.user_key_of(token), "oidc"
        if self.kubernetes is not None:
            if not may_wait:
                return None
            return self.kubernetes.user_key_for(token, impersonate), "serviceaccount"
        raise unauthorized("the bearer token is not valid")


def _bearer_token(authorization: str) -> str:
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise unauthorized("the Authorization header must be 'Bearer <token>'")
    return token


def issuer_of(token: str) -> str | None:
    """The `iss` a JWT claims, unverified: only to choose who verifies it."""
    if unverified_part(token, HEADER) is None:
        return None
    claims = unverified_part(token, CLAIMS)
    issuer = None if claims is None else claims.get("iss")
    return issuer if isinstance(issuer, str) else None


async def current_caller(request: Request) -> Caller:
    """The FastAPI dependency: the request's `Caller`, or a 401/403 problem.

    On the event loop when finding out is CPU work only (an OIDC token whose signing key
    is cached: about 0.2 ms; an admin answer cached or not needed), which saves a
    thread-pool hop per request; anything that may wait on the network (a JWKS fetch, a
    TokenReview, a SubjectAccessReview) runs in the thread pool, never blocking the loop.
    The result is kept on the request, so several dependencies asking cost one check."""
    cached = getattr(request.state, "caller", None)
    if isinstance(cached, Caller):
        return cached
    authenticator: Authenticator = request.app.state.authenticator
    found = authenticator.identify_now(request)
    if found is None:
        found = await run_in_threadpool(authenticator.identify, request)
    user_key, via = found
    admin = authenticator.cached_admin(user_key)
    if admin is None:
        admin = await run_in_threadpool(authenticator.is_admin, user_key)
    caller = Caller(user_key=user_key, is_admin=admin, via=via)
    request.state.caller = caller
    return caller
