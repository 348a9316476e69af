"""Signing people in to the web inbox: the OIDC authorization-code flow with PKCE.

Authlib's Starlette client does the protocol: it reads the issuer's discovery document
(on the first sign-in, so the API starts while the provider is still coming up), sends
the browser to the provider with `state`, `nonce` and an S256 code challenge kept in the
signed session, and on the callback checks the state, exchanges the code (with the
verifier and the client secret) and verifies the ID token — signature by the issuer's
JWKS, `iss`, `aud`, `exp`, `nonce`.

What the browser keeps afterwards is the user key and a random session id, in the signed
HttpOnly session cookie: no access, ID or refresh token ever reaches it. The session is
also a row (`services/access.py`), so signing out ends it on every replica and a copy of
the cookie dies with it. The API then reads the key through `current_caller`.
"""

from __future__ import annotations

import html
import logging
from datetime import timedelta
from typing import Any

from authlib.common.errors import AuthlibBaseError  # type: ignore[import-untyped,unused-ignore]
from authlib.integrations.starlette_client import OAuth  # type: ignore[import-untyped,unused-ignore]
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from joserfc.errors import JoseError
from starlette.concurrency import run_in_threadpool

from achilles.api.identity.caller import SESSION_ID, SESSION_USER_KEY
from achilles.api.settings import ApiSettings
from achilles.domain.users import is_valid_user_key
from achilles.services import access

log = logging.getLogger(__name__)

CLIENT_NAME = "achilles"
# A session lasts this long after sign-in: its row's `expires_at`, and the cookie's signed
# timestamp (written once, when the session is; the server refuses an older one).
SESSION_MAX_AGE_SECONDS = 8 * 3600
# Scopes asked for: `openid` for the ID token; `profile` and `email` so a provider puts
# `preferred_username` or `email` in it when that is the configured user claim.
SCOPES = "openid profile email"
# Leeway for the ID token's time claims (clock skew between the provider and us).
ID_TOKEN_LEEWAY_SECONDS = 30


def build_oauth(settings: ApiSettings) -> OAuth:
    assert settings.oidc_issuer is not None  # ApiSettings requires it with the web on
    assert settings.web_client_secret is not None
    oauth = OAuth()
    oauth.register(
        name=CLIENT_NAME,
        client_id=settings.web_client_id,
        client_secret=settings.web_client_secret.get_secret_value(),
        server_metadata_url=(
            settings.oidc_issuer.rstrip("/") + "/.well-known/openid-configuration"
        ),
        client_kwargs={"scope": SCOPES, "code_challenge_method": "S256"},
    )
    return oauth


def signin_router(settings: ApiSettings, oauth: OAuth) -> APIRouter:
    """`/auth/login`, `/auth/callback` and `/auth/logout`."""
    assert settings.public_url is not None
    redirect_uri = settings.public_url + "/auth/callback"
    issuer = settings.oidc_issuer
    client_id = settings.web_client_id
    user_claim = settings.oidc_user_claim
    client = oauth.create_client(CLIENT_NAME)
    router = APIRouter(prefix="/auth", include_in_schema=False)

    @router.get("/login")
    async def login(request: Request) -> Response:
        try:
            response: Response = await client.authorize_redirect(request, redirect_uri)
        except Exception as exc:  # no discovery document (transport or JSON)
            log.warning("web sign-in: the identity provider is unreachable: %s", _one_line(exc))
            return failure_page(
                "The identity provider cannot be reached right now. Try again in a moment.",
                status=503,
            )
        return response

    @router.get("/callback")
    async def callback(request: Request) -> Response:
        try:
            token: dict[str, Any] = await client.authorize_access_token(
                request,
                # Authlib checks `azp` but not that `aud` names us (OIDC Core 3.1.3.7).
                claims_options={
                    "iss": {"essential": True, "value": issuer},
                    "aud": {"essential": True, "values": [client_id]},
                },
                leeway=ID_TOKEN_LEEWAY_SECONDS,
            )
            claims = token.get("userinfo") or {}
            user_key = claims.get(user_claim)
            if user_key is None and "userinfo_endpoint" in client.server_metadata:
                user_key = (await client.userinfo(token=token)).get(user_claim)
        except AuthlibBaseError as exc:  # state, provider error, code exchange
            # `error` may come from the query string: one short line, escaped on the page.
            reason = " ".join(str(exc.error or "refused").split())[:80]
            log.info("web sign-in refused: %s", reason)
            return failure_page(f"Sign-in did not complete ({reason}).", status=400)
        except JoseError as exc:  # the ID token: signature, iss, aud, exp, nonce
            log.warning("web sign-in: ID token refused: %s", exc.error)
            return failure_page("The identity provider's ID token was refused.", status=400)
        except Exception as exc:  # the token, JWKS or userinfo endpoint: transport
            log.warning("web sign-in: the identity provider is unreachable: %s", _one_line(exc))
            return failure_page(
                "The identity provider cannot be reached right now. Try again in a moment.",
                status=503,
            )
        if not isinstance(user_key, str) or not is_valid_user_key(user_key):
            log.warning("web sign-in: no valid %r claim in the identity token", user_claim)
            return failure_page(
                f"The identity provider named no valid user key (claim {user_claim!r}).",
                status=400,
            )
        # A fresh session: nothing from before sign-in (the flow's state) carries over.
        session_id = await run_in_threadpool(
            access.start_web_session,
            request.app.state.database,
            user_key,
            timedelta(seconds=SESSION_MAX_AGE_SECONDS),
        )
        request.session.clear()
        request.session[SESSION_USER_KEY] = user_key
        request.session[SESSION_ID] = session_id
        return RedirectResponse("/", status_code=303)

    @router.post("/logout", status_code=204)
    async def logout(request: Request) -> Response:
        # CSRF-checked like every unsafe request with the session cookie. The row ends
        # too: a copy of the cookie taken before is no session from now on, anywhere.
        session_id = request.session.get(SESSION_ID)
        request.session.clear()
        if isinstance(session_id, str):
            await run_in_threadpool(access.end_web_session, request.app.state.database, session_id)
            request.app.state.standing.forget_session(session_id)
        return Response(status_code=204)

    return router


def failure_page(message: str, *, status: int) -> HTMLResponse:
    """A small page saying why sign-in failed, with a way to try again."""
    body = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        "<title>Sign-in failed - Achilles inbox</title>"
        '<link rel=stylesheet href="/static/inbox.css"></head>'
        '<body><main class="signin"><h1>Sign-in failed</h1>'
        f"<p>{html.escape(message)}</p>"
        '<p><a class="button" href="/auth/login">Sign in again</a></p></main></body></html>'
    )
    return HTMLResponse(body, status_code=status)


def _one_line(exc: BaseException) -> str:
    # Authlib's transport (httpx2) is its own business: say what failed, no traceback.
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]
