"""Whose inbox a request reads: one owner's, always. The caller's own by default; an admin
may name another owner (`owner=<key>`), but not every owner at once (`owner=*`: the
queue's order, blocked first, is one person's). One item by id: the shared `ReadScope`
(an admin reads anyone's); a reply or a decision acts for the caller, on their own items
only (the services take the caller's key)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query

from achilles.api.dependencies import EVERY_OWNER, CurrentCaller, owner_scope
from achilles.api.problems import Problem


async def _inbox_owner(
    caller: CurrentCaller,
    owner: Annotated[
        str | None, Query(max_length=254, description="Another owner's key (admins)")
    ] = None,
) -> str:
    if owner == EVERY_OWNER:
        raise Problem(422, "owner: the inbox is one owner's; name the owner (admins)")
    owner_key = owner_scope(caller, owner)
    assert owner_key is not None
    return owner_key


# The owner whose inbox a list reads.
InboxOwner = Annotated[str, Depends(_inbox_owner)]
