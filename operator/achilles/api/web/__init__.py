"""The web inbox: a page at `/` where an employee answers their agents' questions.

Plain HTML, a stylesheet and a few small ES modules, served as static files by the
API itself (no build step): the page calls the same JSON API as the portal, with the signed
session cookie instead of a bearer token, and follows changes through `/v1/events`.

`install_web(app, settings)` adds everything the browser needs: the OIDC sign-in
(`signin.py`), the session cookie, the CSRF check on writes and the page's security
headers (`security.py`), and the pages (`pages.py`). `create_app` calls it when the web
client is configured (`ACHILLES_API_WEB_CLIENT_ID`).
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.middleware.sessions import SessionMiddleware

from achilles.api.settings import ApiSettings
from achilles.api.web.pages import pages_router, static_files
from achilles.api.web.security import (
    CSRF_COOKIE,
    CSRF_HEADER,
    SESSION_COOKIE,
    PageHeadersMiddleware,
    SessionCSRFMiddleware,
    derived_secret,
)
from achilles.api.web.signin import SESSION_MAX_AGE_SECONDS, build_oauth, signin_router

__all__ = ["SESSION_COOKIE", "SESSION_MAX_AGE_SECONDS", "install_web"]


def install_web(app: FastAPI, settings: ApiSettings) -> None:
    """Serve the web inbox from `app`: sign-in, session, CSRF, pages."""
    assert settings.session_secret is not None  # ApiSettings requires it with the web on
    assert settings.public_url is not None
    secret = settings.session_secret.get_secret_value()
    secure = settings.public_url.startswith("https://")

    app.include_router(signin_router(settings, build_oauth(settings)))
    app.include_router(pages_router())
    app.mount("/static", static_files(), name="web-static")

    # Starlette runs the middleware added last first: headers, then CSRF (before anything
    # reads the body), then the session that `current_caller` reads.
    app.add_middleware(
        SessionMiddleware,
        secret_key=secret,
        session_cookie=SESSION_COOKIE,
        max_age=SESSION_MAX_AGE_SECONDS,
        same_site="lax",
        https_only=secure,
    )
    app.add_middleware(
        SessionCSRFMiddleware,
        secret=derived_secret(secret, "csrf"),
        sensitive_cookies={SESSION_COOKIE},
        cookie_name=CSRF_COOKIE,
        cookie_secure=secure,
        cookie_samesite="lax",
        header_name=CSRF_HEADER,
    )
    app.add_middleware(PageHeadersMiddleware)
