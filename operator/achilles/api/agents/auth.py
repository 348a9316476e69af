"""Who may act on whose agent: the owner runs their own; an admin reads every owner's
agents (the list's `OwnerScope`) but runs only their own."""

from __future__ import annotations

from achilles.api.identity.caller import Caller
from achilles.api.problems import Problem
from achilles.db.database import Database
from achilles.errors import NotFound
from achilles.services import journal_reads


def refuse_an_admins_run_of_others(
    database: Database, caller: Caller, namespace: str, name: str
) -> None:
    """After a run request found no agent `namespace/name` of the caller's: a 403 for an
    admin when the agent is someone else's (they can see it, so a 404 would mislead);
    anyone else gets the 404 (raise the `NotFound` again), whoever owns it."""
    if caller.is_admin and _exists(database, namespace, name):
        raise Problem(403, "an admin reads every owner's agents but runs only their own")


def _exists(database: Database, namespace: str, name: str) -> bool:
    try:
        journal_reads.find_agent(database, namespace, name, owner_key=None)
    except NotFound:
        return False
    return True
