"""The web inbox's pages: `/` is the inbox for a signed-in person, the sign-in page
otherwise; the script and stylesheet are static files beside them.

The pages hold no data: the script reads everything from the JSON API after load, so a
reload shows what the server has now.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from achilles.api.identity.caller import SESSION_USER_KEY

STATIC_DIR = Path(__file__).parent / "static"
# The browser asks again each time (a new release's page never mixes with an old script).
NO_CACHE = {"cache-control": "no-cache"}


def pages_router() -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.api_route("/", methods=["GET", "HEAD"])
    async def inbox_page(request: Request) -> Response:
        page = "inbox.html" if request.session.get(SESSION_USER_KEY) else "signin.html"
        return FileResponse(STATIC_DIR / page, media_type="text/html", headers=NO_CACHE)

    return router


class _StaticFiles(StaticFiles):
    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(NO_CACHE)
        return response


def static_files() -> StaticFiles:
    return _StaticFiles(directory=STATIC_DIR)
