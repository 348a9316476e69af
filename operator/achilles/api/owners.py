"""Whose data a request reads: the `owner` parameter of the list endpoints.

Everyone reads their own by default. An admin (`Caller.is_admin`, a SubjectAccessReview)
may name another owner (`owner=<key>`) or every owner (`owner=*`); anyone else naming
someone else's key is refused the same way whatever that key is (no existence leak).
"""

from __future__ import annotations

from achilles.api.identity.caller import Caller
from achilles.api.problems import Problem
from achilles.domain.users import USER_KEY_RULE, is_valid_user_key

EVERY_OWNER = "*"


def owner_scope(caller: Caller, owner: str | None) -> str | None:
    """The owner key to scope by, or None for every owner (admins only)."""
    if owner is None or owner == caller.user_key:
        return caller.user_key
    if owner != EVERY_OWNER and not is_valid_user_key(owner):
        raise Problem(422, f"owner: {USER_KEY_RULE}, or * (admins)")
    if not caller.is_admin:
        raise Problem(403, "only an admin reads another owner's data (owner=...)")
    return None if owner == EVERY_OWNER else owner
