"""Whether a human's reply wakes the agent (DESIGN.md §5: "if the owner allows it"), pure.

The owner's opt-in lives in the agent's `meta` JSON as
`{"inbox": {"wake_on_reply": true}}`; anything else (absent, malformed, not
exactly `true`) means no. A wake is a manual-style run request, so only a
reply that unblocks the agent — to an item in `blocked` — asks for one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from achilles.domain.inbox import ItemState

META_SECTION = "inbox"
WAKE_ON_REPLY = "wake_on_reply"


@dataclass(frozen=True)
class InboxSettings:
    wake_on_reply: bool = False


def inbox_settings_from_meta(meta: Mapping[str, Any] | None) -> InboxSettings:
    section = (meta or {}).get(META_SECTION)
    if not isinstance(section, Mapping):
        return InboxSettings()
    return InboxSettings(wake_on_reply=section.get(WAKE_ON_REPLY) is True)


def should_request_run(item_state: ItemState, settings: InboxSettings) -> bool:
    """A reply to a blocked item wakes the agent when its owner enabled that."""
    return settings.wake_on_reply and item_state is ItemState.BLOCKED
