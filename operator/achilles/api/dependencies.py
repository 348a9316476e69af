"""What routers get from the application: its database, settings and run requester.

`create_app` puts them on `app.state` once; these small dependencies hand them to a route
(`database: Annotated[Database, Depends(database)]`), so a test app can carry its own.
They are `async` only so FastAPI calls them on the event loop: a plain function would
cost a thread-pool hop per request for an attribute lookup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import Request

if TYPE_CHECKING:
    from achilles.api.identity.caller import Authenticator
    from achilles.api.settings import ApiSettings
    from achilles.db.database import Database
    from achilles.services.run_requests import RunCanceller, RunRequester


async def database(request: Request) -> Database:
    db: Database = request.app.state.database
    return db


async def settings(request: Request) -> ApiSettings:
    value: ApiSettings = request.app.state.settings
    return value


async def run_requester(request: Request) -> RunRequester:
    requester: RunRequester = request.app.state.run_requester
    return requester


async def run_canceller(request: Request) -> RunCanceller:
    """The run requester again: the same annotation writer asks for cancels too."""
    canceller: RunCanceller = request.app.state.run_requester
    return canceller


async def authenticator(request: Request) -> Authenticator:
    """The ways in, for a route that asks a further question of them (a write grant)."""
    found: Authenticator = request.app.state.authenticator
    return found
