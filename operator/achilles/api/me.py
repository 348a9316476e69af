"""`GET /v1/me`: who the API takes the caller to be."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel

from achilles.api.dependencies import CurrentCaller
from achilles.api.problems import PROBLEM_RESPONSES

router = APIRouter(prefix="/v1", tags=["identity"], responses=PROBLEM_RESPONSES)


class Me(BaseModel):
    user_key: str
    is_admin: bool
    via: Literal["oidc", "serviceaccount", "session"]


@router.get("/me", response_model=Me)
async def me(caller: CurrentCaller) -> Me:
    """The caller's user key, whether they may read every owner's data, and how they
    were recognised."""
    # async: nothing here waits, and a plain function costs two thread-pool hops.
    return Me(user_key=caller.user_key, is_admin=caller.is_admin, via=caller.via)
