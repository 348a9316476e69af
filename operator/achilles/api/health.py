"""Probes: `/healthz` (the process answers) and `/readyz` (its database is reachable and
migrated to this release's schema), for the chart's liveness and readiness probes.

Both stay out of the way of the requests they judge: a replica busy with work (its thread
pool taken, its database pool waiting on row locks) is busy, not dead and not broken.
`/healthz` answers on the event loop; `/readyz` asks the database on a thread and a
connection of its own, so a burst of writers never makes every replica unready at once
(an empty Service refuses connections: an outage made by the probe).
"""

from __future__ import annotations

import anyio
import anyio.to_thread
from fastapi import APIRouter, FastAPI, Request
from pydantic import BaseModel

from achilles.api.problems import PROBLEM_MEDIA_TYPE, Problem, ProblemDocument
from achilles.db.database import Database
from achilles.services import schema

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    return Health(status="ok")


def _probe_database(app: FastAPI) -> Database:
    """One connection for the readiness probe beside the requests' pool, made on first use."""
    probe: Database | None = getattr(app.state, "probe_database", None)
    if probe is None:
        database: Database = app.state.database
        probe = Database(
            database.url.difference_update_query(["application_name"]).render_as_string(
                hide_password=False
            ),
            pool_size=1,
            application_name="achilles-api-probe",
        )
        app.state.probe_database = probe
    return probe


def _probe_threads(app: FastAPI) -> anyio.CapacityLimiter:
    limiter: anyio.CapacityLimiter | None = getattr(app.state, "probe_threads", None)
    if limiter is None:
        limiter = anyio.CapacityLimiter(1)
        app.state.probe_threads = limiter
    return limiter


@router.get(
    "/readyz",
    response_model=Health,
    responses={
        503: {
            "model": ProblemDocument,
            "content": {PROBLEM_MEDIA_TYPE: {}},
            "description": "Database unreachable or its schema not current",
        }
    },
)
async def readyz(request: Request) -> Health:
    app = request.app
    status = await anyio.to_thread.run_sync(  # DatabaseUnavailable -> 503
        schema.status, _probe_database(app), limiter=_probe_threads(app)
    )
    if not status.is_current:
        raise Problem(
            503,
            "the database schema is not this release's: run `achilles db upgrade`"
            f" (applied {sorted(status.applied) or 'none'}, expected {sorted(status.heads)})",
        )
    return Health(status="ready")
