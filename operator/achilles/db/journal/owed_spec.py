"""Spec writes the operator owes an Agent resource, recorded with its row (`agents.meta`).

Some changes start in the database and must reach the Agent CR, which is the source
of truth the row mirrors: a withdrawn model clears `spec.model` (seed 000: the owner
chooses again), a deactivated owner writes `spec.enabled: false` (no third lock). The
row changes and the owed write is recorded in the same transaction; the operator then
merge-patches the CR's spec and clears the record (`deliver`). Recorded, not
remembered: a patch that fails half-way through a model's agents, an operator restart,
another replica, all find what is still owed. Until it is delivered, reconciling the CR
reads the owed value in place of the CR's (`settle_owed`), so a model re-created
meanwhile revives nobody and a stale `enabled: true` does not switch an agent back on.

Layout: `meta["owed_spec"] = {"<spec field>": {"value": ..., "reason": "<Event
reason>", "message": "<Event message>"}}`. Only this key is ever written here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, case, cast, func, literal, select, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from achilles.db.journal.models import Agent
from achilles.domain.vocabulary import EventReason, EventType

META_KEY = "owed_spec"
MODEL_FIELD = "model"
ENABLED_FIELD = "enabled"


@dataclass(frozen=True)
class OwedWrite:
    value: Any  # what the spec field must say (JSON: None clears it)
    reason: str  # the Event that tells the owner why: its reason, type and message
    event_type: str
    message: str

    def as_json(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "reason": self.reason,
            "eventType": self.event_type,
            "message": self.message,
        }


@dataclass(frozen=True)
class OwedSpec:
    """What one Agent resource is still owed."""

    agent_id: int
    uid: str | None
    namespace: str
    name: str
    writes: dict[str, OwedWrite]

    @property
    def patch(self) -> dict[str, Any]:
        """The merge patch of `spec` that delivers every owed write."""
        return {field: write.value for field, write in self.writes.items()}


def owing(writes: Mapping[str, OwedWrite]) -> ColumnElement[Any]:
    """`agents.meta` with `writes` added to what the row already owes (an UPDATE's value),
    for rows linked to a CR; a row without one keeps its meta (nothing to tell)."""
    entries = cast(
        literal(json.dumps({field: write.as_json() for field, write in writes.items()})), JSONB
    )
    meta = func.coalesce(Agent.meta, cast(literal("{}"), JSONB))
    section = meta[META_KEY]
    # A section that is not an object (hand-edited) is replaced, not merged into.
    current = case(
        (func.jsonb_typeof(section) == "object", section), else_=cast(literal("{}"), JSONB)
    )
    updated = meta.op("||")(func.jsonb_build_object(META_KEY, current.op("||")(entries)))
    return case((Agent.cr_name.is_(None), Agent.meta), else_=updated)


def writes_from(section: Any) -> dict[str, OwedWrite]:
    if not isinstance(section, Mapping):
        return {}
    writes: dict[str, OwedWrite] = {}
    for field, entry in section.items():
        if isinstance(entry, Mapping) and "value" in entry:
            writes[str(field)] = OwedWrite(
                value=entry["value"],
                reason=str(entry.get("reason", "")),
                event_type=str(entry.get("eventType", "Normal")),
                message=str(entry.get("message", "")),
            )
    return writes


def owed_specs(session: Session, *, limit: int = 500) -> list[OwedSpec]:
    """Agents whose resource is owed a spec write, oldest row first."""
    rows = session.execute(
        select(Agent.id, Agent.cr_uid, Agent.cr_namespace, Agent.cr_name, Agent.meta[META_KEY])
        .where(
            Agent.meta.has_key(META_KEY),
            Agent.cr_namespace.is_not(None),
            Agent.cr_name.is_not(None),
        )
        .order_by(Agent.id)
        .limit(limit)
    ).all()
    owed = []
    for agent_id, uid, namespace, name, section in rows:
        writes = writes_from(section)
        if writes:
            owed.append(OwedSpec(agent_id, uid, str(namespace), str(name), writes))
    return owed


_CLEAR_FIELD = text(
    """
    UPDATE agents
    SET meta = CASE
        WHEN (meta -> :key) - :field = '{}'::jsonb THEN meta - :key
        ELSE jsonb_set(meta, ARRAY[:key], (meta -> :key) - :field)
    END
    WHERE id = :agent_id AND meta -> :key -> :field = CAST(:entry AS jsonb)
    """
)


def delivered(session: Session, agent_id: int, writes: Mapping[str, OwedWrite]) -> None:
    """The resource now says what `writes` owed: forget each of them, unless a newer
    write of the same field was recorded meanwhile (then it is still owed)."""
    for field, write in writes.items():
        session.execute(
            _CLEAR_FIELD,
            {
                "key": META_KEY,
                "field": field,
                "agent_id": agent_id,
                "entry": json.dumps(write.as_json()),
            },
        )


# --- the writes owed, and what the owner is told when they land ---


def model_withdrawn(model_name: str) -> dict[str, OwedWrite]:
    return {
        MODEL_FIELD: OwedWrite(
            None,
            EventReason.MODEL_WITHDRAWN,
            EventType.WARNING,
            f"AgentModel {model_name} was deleted: spec.model cleared; the agent is stopped"
            " until its owner picks a model",
        )
    }


def suspended_after_failures(message: str) -> dict[str, OwedWrite]:
    """Auto-suspend switches the owner's lock off (seed 000: two locks, no third)."""
    return {
        ENABLED_FIELD: OwedWrite(False, EventReason.AGENT_SUSPENDED, EventType.WARNING, message)
    }


def owner_deactivated() -> dict[str, OwedWrite]:
    return {
        ENABLED_FIELD: OwedWrite(
            False,
            EventReason.OWNER_DEACTIVATED,
            EventType.NORMAL,
            "the owner's account is deactivated: spec.enabled set to false",
        )
    }
