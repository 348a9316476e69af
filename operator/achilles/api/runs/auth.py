"""Who may cancel whose run: the owner their own; an admin another owner's only with
the write grant (reading is not acting)."""

from __future__ import annotations

from achilles.api.identity.caller import Authenticator, Caller
from achilles.api.problems import Problem
from achilles.db.database import Database
from achilles.services import journal_reads


def cancel_scope(
    database: Database, caller: Caller, ways_in: Authenticator, run_id: int
) -> str | None:
    """The owner scope a cancel of `run_id` runs in: the caller's key, or None (any run)
    for an admin with the write grant (`update` on `ownerdata`) cancelling another
    owner's run; 403 for an admin who only reads. Not an admin: the caller's own runs
    (another's reads as missing: 404 from the service)."""
    if not caller.is_admin:
        return caller.user_key
    found = journal_reads.find_run(database, run_id, owner_key=None)
    if found.agent.owner_key == caller.user_key:
        return caller.user_key
    if not ways_in.may_write_for_others(caller.user_key):
        raise Problem(
            403,
            "an admin cancels another owner's run only with the write grant (RBAC: verb"
            " update on resource ownerdata of achilles.io); reading it is not enough",
        )
    return None
