"""`create_app`: the API as one FastAPI application, built from settings and a database.

Everything the app needs is passed in (or built from `ApiSettings`) and kept on
`app.state`; nothing is read from the environment here, so tests build apps with their own
database, verifiers and run requester, and `achilles api` builds the one it serves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter, FastAPI

from achilles.api import agents, events, health, inbox, me, runs
from achilles.api.docs_page import install_docs
from achilles.api.identity.caller import Authenticator
from achilles.api.identity.standing import Standing
from achilles.api.limits import BodySizeLimit, NoStoreMiddleware
from achilles.api.problems import install_problem_handlers
from achilles.api.throttle import ClientLimitMiddleware, Throttle, parse_limit

if TYPE_CHECKING:
    from achilles.api.settings import ApiSettings
    from achilles.db.database import Database
    from achilles.services.run_requests import RunRequester

# The API's routers, one per resource, in the order OpenAPI shows them.
ROUTERS: tuple[APIRouter, ...] = (
    health.router,
    me.router,
    agents.router,
    runs.router,
    inbox.router,
    events.router,
)
DESCRIPTION = """\
The people's side of Achilles: a person's agents, runs and inbox, owner-scoped.
Authentication, errors (RFC 9457 problem documents) and pagination: docs/api.md."""


def default_authenticator(settings: ApiSettings) -> Authenticator:
    """The ways in that `settings` turn on."""
    from achilles.api.identity.oidc import OidcVerifier

    oidc = None
    if settings.oidc_issuer is not None and settings.oidc_audience is not None:
        oidc = OidcVerifier(
            settings.oidc_issuer,
            settings.oidc_audience,
            settings.oidc_user_claim,
            settings.oidc_algorithms,
            clients=settings.oidc_clients,
        )
    kubernetes = None
    if settings.kube_audience is not None:
        from achilles.api.identity.kubernetes import KubernetesIdentity

        kubernetes = KubernetesIdentity.from_settings(settings)
    return Authenticator(oidc=oidc, kubernetes=kubernetes)


def create_app(
    settings: ApiSettings,
    database: Database,
    *,
    authenticator: Authenticator | None = None,
    run_requester: RunRequester | None = None,
) -> FastAPI:
    """The API application; `authenticator` and `run_requester` default to the ones
    `settings` describe (the cluster of KUBECONFIG, else the pod's)."""
    from achilles.services.run_requests import KubernetesRunRequester

    app = FastAPI(
        title="Achilles API",
        version="1",
        description=DESCRIPTION,
        openapi_url="/openapi.json",
        docs_url=None,  # ours: `docs_page`, no CDN
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.database = database
    app.state.authenticator = authenticator or default_authenticator(settings)
    app.state.standing = Standing(database)
    throttle = Throttle(
        per_user=parse_limit(settings.rate_limit_user),
        per_client=parse_limit(settings.rate_limit_client),
        auth_failures=parse_limit(settings.auth_failure_limit),
    )
    app.state.throttle = throttle
    app.state.run_requester = run_requester or KubernetesRunRequester(settings.kubeconfig_path)
    install_problem_handlers(app)
    install_docs(app)
    for router in ROUTERS:
        app.include_router(router)
    if settings.web_enabled:
        from achilles.api.web import install_web

        install_web(app, settings)
    # A body too large is refused before any other middleware reads it; outside it only
    # the header that keeps `/v1` answers (its 413s too) out of caches.
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(ClientLimitMiddleware, throttle=throttle)
    app.add_middleware(NoStoreMiddleware)
    return app
