"""The API's routers, one module per resource; each exposes `router: fastapi.APIRouter`.

`ROUTERS` lists them in the order OpenAPI shows them. `create_app` includes every module
named here that exists: the inbox and events routers (`inbox.py`, `events.py`) are written
alongside this package and join as soon as their files land; a module that exists but
fails to import fails the app's start (never silently left out).
"""

from __future__ import annotations

import importlib
import importlib.util

from fastapi import APIRouter

ROUTERS = ("health", "me", "agents", "runs", "inbox", "approvals", "events")


def available_routers() -> list[APIRouter]:
    routers = []
    for name in ROUTERS:
        module_name = f"{__name__}.{name}"
        if importlib.util.find_spec(module_name) is None:
            continue
        router = importlib.import_module(module_name).router
        assert isinstance(router, APIRouter), f"{module_name}.router is not an APIRouter"
        routers.append(router)
    return routers
