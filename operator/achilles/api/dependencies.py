"""What routers get from the application: its database, settings and run requester.

`create_app` puts them on `app.state` once; these small dependencies hand them to a route
(`database: Annotated[Database, Depends(database)]`), so a test app can carry its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import Request

if TYPE_CHECKING:
    from achilles.api.settings import ApiSettings
    from achilles.db.database import Database
    from achilles.services.run_requests import RunRequester


def database(request: Request) -> Database:
    db: Database = request.app.state.database
    return db


def settings(request: Request) -> ApiSettings:
    value: ApiSettings = request.app.state.settings
    return value


def run_requester(request: Request) -> RunRequester:
    requester: RunRequester = request.app.state.run_requester
    return requester
