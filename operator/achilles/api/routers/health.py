"""Probes: `/healthz` (the process answers) and `/readyz` (its database is reachable and
migrated to this release's schema), for the chart's liveness and readiness probes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from achilles.api.dependencies import database
from achilles.api.problems import PROBLEM_MEDIA_TYPE, Problem, ProblemDocument
from achilles.db.database import Database
from achilles.services import schema

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    return Health(status="ok")


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
def readyz(database: Annotated[Database, Depends(database)]) -> Health:
    status = schema.status(database)  # DatabaseUnavailable -> 503
    if not status.is_current:
        raise Problem(
            503,
            "the database schema is not this release's: run `achilles db upgrade`"
            f" (applied {sorted(status.applied) or 'none'}, expected {sorted(status.heads)})",
        )
    return Health(status="ready")
