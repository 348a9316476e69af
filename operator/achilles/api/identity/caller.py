"""The caller of a request, as one FastAPI dependency: `current_caller`.

Order (docs/api.md#authentication):
1. `Authorization: Bearer <token>`. A token whose (unverified) `iss` is the configured
   OIDC issuer is verified as an OIDC access token (`oidc.OidcVerifier`); any other token
   goes to the Kubernetes API server's TokenReview when ServiceAccount tokens are enabled
   (`kubernetes.KubernetesIdentity`). A token either way refuses is 401; there is no
   falling through to a weaker way.
2. The web inbox's session (`request.session`: the user key and the session's id),
   present only when the web helper's SessionMiddleware is installed; the session must
   not have ended (signed out: `api_sessions`, every replica).
3. Else 401.

Then whether the person may still act (`standing.Standing`): an owner whose
`users.active` is false is 403 whatever credential they hold (issue 37).

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
from achilles.api.identity.standing import Standing
from achilles.api.problems import Problem, unauthorized
from achilles.api.throttle import Throttle, client_address

IMPERSONATE_USER = "Impersonate-User"
Via = Literal["oidc", "serviceaccount", "session"]


SESSION_USER_KEY = "user_key"
SESSION_ID = "sid"


@dataclass(frozen=True)
class Identity:
    """Who a credential names, how, and until when it holds."""

    user_key: str
    via: Via
    # When the credential stops verifying (seconds since the epoch): a token's `exp`
    # (with the verifier's leeway); None when it does not say (a session's row does).
    valid_until: float | None = None
    session_id: str | None = None  # the web session's id, for its server-side row


@dataclass(frozen=True)
class Caller:
    """The person a request acts for. `via` says how they were recognised."""

    user_key: str
    is_admin: bool
    via: Via
    valid_until: float | None = None
    session_id: str | None = None

    def may_read(self, owner_key: str) -> bool:
        """Owner-scoping in one place: a person reads their own data, an admin anyone's."""
        return self.is_admin or owner_key == self.user_key


class BearerVerifier(Protocol):
    issuer: str

    def user_key_of(self, token: str) -> str:
        """The user key the token names; `Problem` 401 if the token is not valid."""
        ...

    def verified(self, token: str) -> tuple[str, float]:
        """The user key the token names and until when it verifies; 401 if not valid."""
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

    def identify(self, request: Request) -> Identity:
        """The user key the request acts for and how it was recognised; 401/403 if none."""
        found = self._identify(request, may_wait=True)
        assert found is not None
        return found

    def identify_now(self, request: Request) -> Identity | None:
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

    def _identify(self, request: Request, *, may_wait: bool) -> Identity | None:
        authorization = request.headers.get("authorization")
        if authorization is not None:
            return self._bearer(request, authorization, may_wait=may_wait)
        if "session" in request.scope:  # read by its middleware already
            user_key = request.session.get(SESSION_USER_KEY)
            session_id = request.session.get(SESSION_ID)
            if isinstance(user_key, str) and user_key and isinstance(session_id, str):
                return Identity(user_key, "session", session_id=session_id)
        raise unauthorized("no credentials: send Authorization: Bearer <token>")

    def _bearer(self, request: Request, authorization: str, *, may_wait: bool) -> Identity | None:
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
            user_key, valid_until = self.oidc.verified(token)
            return Identity(user_key, "oidc", valid_until=valid_until)
        if self.kubernetes is not None:
            if not may_wait:
                return None
            user_key = self.kubernetes.user_key_for(token, impersonate)
            # The API server reviewed the token, so its `exp` is the token's.
            return Identity(user_key, "serviceaccount", valid_until=_expiry_of(token))
        raise unauthorized("the bearer token is not valid")


def _expiry_of(token: str) -> float | None:
    claims = unverified_part(token, CLAIMS)
    expires = None if claims is None else claims.get("exp")
    if isinstance(expires, bool) or not isinstance(expires, int | float):
        return None
    return float(expires)


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
    throttle: Throttle | None = getattr(request.app.state, "throttle", None)
    client = client_address(request.scope)
    try:
        found = authenticator.identify_now(request)
        if found is None:
            # Checking costs a network call (a TokenReview, the issuer's keys): not for
            # a client that failed too often already.
            if throttle is not None:
                throttle.check_auth_failures(client)
            found = await run_in_threadpool(authenticator.identify, request)
    except Problem as problem:
        if problem.status == 401 and throttle is not None:
            throttle.auth_failed(client)
        raise
    if throttle is not None:
        throttle.user_request(found.user_key)
    standing: Standing | None = getattr(request.app.state, "standing", None)
    if standing is not None:
        await check_standing(request, standing, found)
    user_key = found.user_key
    admin = authenticator.cached_admin(user_key)
    if admin is None:
        admin = await run_in_threadpool(authenticator.is_admin, user_key)
    caller = Caller(
        user_key=user_key,
        is_admin=admin,
        via=found.via,
        valid_until=found.valid_until,
        session_id=found.session_id,
    )
    request.state.caller = caller
    return caller


async def check_standing(request: Request, standing: Standing, identity: Identity) -> None:
    """401 for a web session that ended (signed out, expired); 403 for a deactivated
    owner. Cached answers stay on the event loop; the rest read in a thread."""
    if identity.session_id is not None:
        session = standing.cached_session(identity.session_id)
        if session is None:
            session = await run_in_threadpool(standing.session, identity.session_id)
        if not session.live or session.user_key != identity.user_key:
            request.session.clear()
            raise unauthorized("the web session has ended: sign in again")
        active = session.owner_active
    else:
        cached = standing.cached_owner_active(identity.user_key)
        active = (
            cached
            if cached is not None
            else await run_in_threadpool(standing.owner_active, identity.user_key)
        )
    if not active:
        raise Problem(403, f"user {identity.user_key!r} is deactivated")


async def still_allowed(request: Request, caller: Caller) -> bool:
    """For a long request (an event stream) to ask again: False once the caller's owner
    was deactivated or their web session ended."""
    standing: Standing | None = getattr(request.app.state, "standing", None)
    if standing is None:
        return True
    identity = Identity(caller.user_key, caller.via, caller.valid_until, caller.session_id)
    try:
        await check_standing(request, standing, identity)
    except Problem:
        return False
    return True
