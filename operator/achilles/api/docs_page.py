"""`/docs`: Swagger UI for `/openapi.json`, from files this process serves (issue 37).

FastAPI's own `/docs` loads Swagger UI's script and stylesheet from a CDN and starts it
with an inline script, on the origin of the web inbox's session cookie: whoever serves
(or subverts) that CDN runs script with the person's session. Here the assets come from
a package (`swagger-ui-py`'s copy of Swagger UI 5, no network; found without importing
it), the start is a file of ours, and every
`/docs` answer carries a Content-Security-Policy that allows scripts and styles from
this origin only (Swagger UI's images are `data:` URLs), no framing, no referrer.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse, Response
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

DOCS_DIR = Path(__file__).parent / "docs_static"
DOCS_PATH = "/docs"
# Swagger UI's two files the page loads, from the package's copy.
SWAGGER_FILES = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css"}


def swagger_ui_dir() -> Path:
    """Where swagger-ui-py keeps Swagger UI's files (its package is never imported)."""
    spec = importlib.util.find_spec("swagger_ui")
    locations = None if spec is None else spec.submodule_search_locations
    if not locations:
        raise RuntimeError("the swagger-ui-py package is not installed")
    return Path(next(iter(locations))) / "static"


CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    )
)
DOCS_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cross-origin-opener-policy": "same-origin",
}


def install_docs(app: FastAPI) -> None:
    """Serve `/docs` (the page, its start script, Swagger UI's files) with its headers.
    `create_app` builds the app with FastAPI's own docs off."""
    router = APIRouter(include_in_schema=False)

    @router.get(DOCS_PATH)
    async def docs() -> Response:
        return FileResponse(DOCS_DIR / "docs.html", media_type="text/html")

    @router.get(f"{DOCS_PATH}/init.js")
    async def docs_script() -> Response:
        return FileResponse(DOCS_DIR / "init.js", media_type="text/javascript")

    assets = swagger_ui_dir()

    @router.get(DOCS_PATH + "/swagger/{name}")
    async def swagger_file(name: str) -> Response:
        media_type = SWAGGER_FILES.get(name)
        if media_type is None:
            return Response(status_code=404)
        return FileResponse(assets / name, media_type=media_type)

    app.include_router(router)
    app.add_middleware(DocsHeadersMiddleware)


class DocsHeadersMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or not (path == DOCS_PATH or path.startswith(DOCS_PATH + "/")):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in DOCS_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, with_headers)
