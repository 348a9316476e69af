"""What a route may ask for, typed once: who calls, the database, the run requester, whose
data it reads.

`create_app` puts the application's parts on `app.state` once; the aliases below hand
them to a route as a parameter's type (`caller: CurrentCaller`, `database: DatabaseDep`),
so a test app can carry its own. The getters are `async` only so FastAPI calls them on
the event loop: a plain function would cost a thread-pool hop per request for an
attribute lookup. FastAPI runs each dependency once per request however many routes'
parameters (and other dependencies) ask for it.

Owner scope, in one place (docs/api.md#admins). Everyone reads their own by default.
An admin (`Caller.is_admin`, a SubjectAccessReview) may name another owner
(`owner=<key>`) or every owner (`owner=*`) in a list; anyone else naming someone else's
key is refused the same way whatever that key is (no existence leak). One object by id
(`ReadScope`): an admin reads anyone's, anyone else their own, and another's reads
exactly like a missing one (404).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request

from achilles.api.identity.caller import Authenticator, Caller, current_caller
from achilles.api.problems import Problem
from achilles.api.settings import ApiSettings
from achilles.db.database import Database
from achilles.domain.users import USER_KEY_RULE, is_valid_user_key
from achilles.services.run_requests import RunCanceller, RunRequester

__all__ = [
    "EVERY_OWNER",
    "AuthenticatorDep",
    "CurrentCaller",
    "DatabaseDep",
    "OwnerParam",
    "OwnerScope",
    "ReadScope",
    "RunCancellerDep",
    "RunRequesterDep",
    "SettingsDep",
    "owner_scope",
]

EVERY_OWNER = "*"


async def _database(request: Request) -> Database:
    db: Database = request.app.state.database
    return db


async def _settings(request: Request) -> ApiSettings:
    value: ApiSettings = request.app.state.settings
    return value


async def _run_requester(request: Request) -> RunRequester:
    requester: RunRequester = request.app.state.run_requester
    return requester


async def _run_canceller(request: Request) -> RunCanceller:
    """The run requester again: the same annotation writer asks for cancels too."""
    canceller: RunCanceller = request.app.state.run_requester
    return canceller


async def _authenticator(request: Request) -> Authenticator:
    """The ways in, for a route that asks a further question of them (a write grant)."""
    found: Authenticator = request.app.state.authenticator
    return found


CurrentCaller = Annotated[Caller, Depends(current_caller)]
DatabaseDep = Annotated[Database, Depends(_database)]
SettingsDep = Annotated[ApiSettings, Depends(_settings)]
RunRequesterDep = Annotated[RunRequester, Depends(_run_requester)]
RunCancellerDep = Annotated[RunCanceller, Depends(_run_canceller)]
AuthenticatorDep = Annotated[Authenticator, Depends(_authenticator)]


# --- owner scope ---


OwnerParam = Annotated[
    str | None,
    Query(
        max_length=254,
        description="Another owner's key, or `*` for every owner (admins)",
    ),
]


def owner_scope(caller: Caller, owner: str | None) -> str | None:
    """The owner key to scope a list by, or None for every owner (admins only)."""
    if owner is None or owner == caller.user_key:
        return caller.user_key
    if owner != EVERY_OWNER and not is_valid_user_key(owner):
        raise Problem(422, f"owner: {USER_KEY_RULE}, or * (admins)")
    if not caller.is_admin:
        raise Problem(403, "only an admin reads another owner's data (owner=...)")
    return None if owner == EVERY_OWNER else owner


async def _owner_scope(caller: CurrentCaller, owner: OwnerParam = None) -> str | None:
    return owner_scope(caller, owner)


async def _read_scope(caller: CurrentCaller) -> str | None:
    return None if caller.is_admin else caller.user_key


# A list's scope from its `owner` parameter: the owner's key, or None for every owner.
OwnerScope = Annotated[str | None, Depends(_owner_scope)]
# One object's scope: None (an admin reads anyone's) or the caller's own key.
ReadScope = Annotated[str | None, Depends(_read_scope)]
