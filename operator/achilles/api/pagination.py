"""Opaque cursors for keyset pages (docs/api.md#pagination).

A cursor names the last item of the page it came with (its position in a list, not an
offset), so items added after it was handed out never shift the next page: a client
walks a list to its end without duplicates or gaps, however many runs are written
meanwhile. It is opaque to clients (base64url of `<list>:<id>`) and bound to the list it
came from: a runs cursor given to /v1/agents is refused. Every list answers with a
`Page` of its items.
"""

from __future__ import annotations

import base64
import binascii
from typing import Generic, TypeVar

from pydantic import BaseModel, Field

from achilles.api.problems import Problem

MAX_CURSOR_LENGTH = 100
# What a cursor looks like (base64url without padding); anything else is refused unread.
CURSOR_PATTERN = r"^[A-Za-z0-9_-]{1,100}$"
DEFAULT_LIMIT = 50
MAX_LIMIT = 500


def encode_cursor(kind: str, last_id: int) -> str:
    return base64.urlsafe_b64encode(f"{kind}:{last_id}".encode()).decode().rstrip("=")


def decode_cursor(kind: str, cursor: str | None) -> int | None:
    """The id the cursor stands at, or None for the first page; 400 for anything this
    API did not hand out for `kind`."""
    if cursor is None:
        return None
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        text = ""
    prefix, _, number = text.partition(":")
    if prefix != kind or not number.isascii() or not number.isdigit() or len(number) > 19:
        raise Problem(400, f"cursor: not a cursor of this list (got {cursor[:40]!r})")
    return int(number)


def next_cursor(kind: str, ids: list[int], limit: int) -> str | None:
    """The cursor after a page that asked for `limit` + 1 items and got `ids`."""
    return encode_cursor(kind, ids[limit - 1]) if len(ids) > limit else None


ItemT = TypeVar("ItemT")


class Page(BaseModel, Generic[ItemT]):
    """One page of a list, in keyset order (docs/api.md#pagination). Each list names its
    own subclass (`class AgentPage(Page[AgentDocument])`), so OpenAPI's schema names stay
    the clients' (`AgentPage`, not pydantic's `Page_AgentDocument_`)."""

    items: list[ItemT]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page")
