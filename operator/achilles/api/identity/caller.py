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


class ServiceAccountIdentity(Protocol):
    def user_key_for(self, token: str, impersonate: str | None) -> str:
        """The user key a ServiceAccount token acts for: the `Impersonate-User` it may
        impersonate. 401 for a token the API server does not accept, 403 for an
        impersonation RBAC does not grant or a missing one."""
        ...

    def is_admin(self, user_key: str) -> bool: ...


@dataclass(frozen=True)
class Authenticator:
    """The configured ways in; `None` for a way that is off."""

    oidc: BearerVerifier | None
    kubernetes: ServiceAccountIdentity | None

    def caller_of(self, request: Request) -> Caller:
        authorization = request.headers.get("authorization")
        if authorization is not None:
            return self._bearer(request, authorization)
        if "session" in request.scope:
            user_key = request.session.get("user_key")
            if isinstance(user_key, str) and user_key:
                return self._caller(user_key, "session")
        raise unauthorized("no credentials: send Authorization: Bearer <token>")

    def _bearer(self, request: Request, authorization: str) -> Caller:
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise unauthorized("the Authorization header must be 'Bearer <token>'")
        impersonate = request.headers.get(IMPERSONATE_USER)
        if self.oidc is not None and issuer_of(token) == self.oidc.issuer:
            if impersonate is not None:
                raise Problem(
                    403,
                    f"{IMPERSONATE_USER} is honoured only for a Kubernetes ServiceAccount"
                    " that RBAC lets impersonate that user",
                )
            return self._caller(self.oidc.user_key_of(token), "oidc")
        if self.kubernetes is not None:
            return self._caller(self.kubernetes.user_key_for(token, impersonate), "serviceaccount")
        raise unauthorized("the bearer token is not valid")

    def _caller(self, user_key: str, via: Via) -> Caller:
        admin = self.kubernetes is not None and self.kubernetes.is_admin(user_key)
        return Caller(user_key=user_key, is_admin=admin, via=via)


def issuer_of(token: str) -> str | None:
    """The `iss` a JWT claims, unverified: only to choose who verifies it."""
    import jwt

    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return None
    issuer = claims.get("iss")
    return issuer if isinstance(issuer, str) else None


def current_caller(request: Request) -> Caller:
    """The FastAPI dependency: the request's `Caller`, or a 401/403 problem.

    A plain function: FastAPI runs it in its thread pool, so a JWKS fetch or a
    TokenReview never blocks the event loop. The result is kept on the request, so
    several dependencies asking cost one check."""
    cached = getattr(request.state, "caller", None)
    if isinstance(cached, Caller):
        return cached
    authenticator: Authenticator = request.app.state.authenticator
    caller = authenticator.caller_of(request)
    request.state.caller = caller
    return caller
