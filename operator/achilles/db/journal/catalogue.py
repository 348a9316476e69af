"""The admin-curated rows the operator mirrors from cluster-scoped CRs: models, tools,
platform settings (neighbour tables for standalone installs, seed 000)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, literal_column, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from achilles.db.journal.agent_links import UNKNOWN_TOOLS_KEY
from achilles.db.journal.models import Agent, AgentModel, AgentToolLink, Tool
from achilles.db.journal.owed_spec import META_KEY as OWED_KEY
from achilles.db.journal.owed_spec import MODEL_FIELD, model_withdrawn, owing


@dataclass(frozen=True)
class ModelRow:
    name: str
    base_url: str
    provider_model: str
    api_key_secret_name: str | None
    api_key_secret_key: str | None
    is_default: bool
    uid: str | None = None  # the AgentModel object's (None: not from a cluster object)


def upsert_model(session: Session, model: ModelRow) -> tuple[int, bool]:
    """The model's row written: (its id, whether this created it)."""
    values = {
        "base_url": model.base_url,
        "provider_model": model.provider_model,
        "api_key_secret_name": model.api_key_secret_name,
        "api_key_secret_key": model.api_key_secret_key,
        "cr_uid": model.uid,
    }
    # `xmax = 0`: the row version is this INSERT's own, not an update of a conflicting row.
    row: tuple[int, bool] = (
        session.execute(
            insert(AgentModel)
            .values(name=model.name, is_default=False, **values)
            .on_conflict_do_update(index_elements=[AgentModel.name], set_=values)
            .returning(AgentModel.id, literal_column("xmax = 0"))
        )
        .tuples()
        .one()
    )
    return int(row[0]), bool(row[1])


def set_default_model(session: Session, name: str, is_default: bool) -> bool:
    """Mark or unmark the list preset; False when another model already holds it
    (the partial unique index `uq_agent_models_single_default` keeps one)."""
    current = session.execute(
        select(AgentModel.name).where(AgentModel.is_default.is_(True))
    ).scalar_one_or_none()
    if is_default and current not in (None, name):
        return False
    session.execute(update(AgentModel).where(AgentModel.name == name).values(is_default=is_default))
    return True


def default_model_name(session: Session) -> str | None:
    return session.execute(
        select(AgentModel.name).where(AgentModel.is_default.is_(True))
    ).scalar_one_or_none()


def model_id_by_name(session: Session, name: str) -> int | None:
    return session.execute(
        select(AgentModel.id).where(AgentModel.name == name)
    ).scalar_one_or_none()


@dataclass(frozen=True)
class AgentRef:
    agent_id: int
    uid: str | None
    namespace: str | None
    name: str | None


def agents_awaiting_a_model(session: Session) -> list[AgentRef]:
    """Agents of a CR with no model and none owed: those whose CR may name a model that
    did not exist when they were reconciled (the row keeps the id, not the name). A
    withdrawn model's agents are owed `spec.model: null` until their CR says so, and
    then name none: a model created under that name revives nobody (DESIGN §4)."""
    rows = session.execute(
        select(Agent.id, Agent.cr_uid, Agent.cr_namespace, Agent.cr_name).where(
            Agent.model_id.is_(None),
            Agent.cr_uid.is_not(None),
            ~func.coalesce(Agent.meta[OWED_KEY].has_key(MODEL_FIELD), False),
        )
    ).all()
    return [AgentRef(row.id, row.cr_uid, row.cr_namespace, row.cr_name) for row in rows]


def is_another_object(mirrored: str | None, uid: str | None) -> bool:
    """A row that mirrors object `mirrored` met object `uid` of the same name: another
    object (its predecessor was deleted) when both are known and differ (0020)."""
    return mirrored is not None and uid is not None and mirrored != uid


def model_uid(session: Session, name: str) -> tuple[bool, str | None]:
    """(whether a model of this name is in the allowlist, the uid of its object)."""
    row = session.execute(
        select(AgentModel.cr_uid).where(AgentModel.name == name).with_for_update()
    ).first()
    return (row is not None, row.cr_uid if row is not None else None)


def withdraw_model(session: Session, name: str, *, uid: str | None = None) -> list[AgentRef]:
    """Delete the model; its agents' `model_id` becomes NULL and they stop. Each of their
    CRs is owed `spec.model: null` (`owed_spec`), recorded in this transaction, so a
    failed or interrupted delivery is finished later; until then a model re-created under
    this name revives nobody. Returns those agents. `uid`: the deleted object's; a row
    that mirrors another object of the name (made since) is left alone."""
    found, mirrored = model_uid(session, name)
    if not found or is_another_object(mirrored, uid):
        return []
    model_id = model_id_by_name(session, name)
    if model_id is None:
        return []
    rows = session.execute(
        update(Agent)
        .where(Agent.model_id == model_id)
        .values(model_id=None, next_run_at=None, meta=owing(model_withdrawn(name)))
        .returning(Agent.id, Agent.cr_uid, Agent.cr_namespace, Agent.cr_name)
    ).all()
    session.execute(delete(AgentModel).where(AgentModel.id == model_id))
    return [AgentRef(row.id, row.cr_uid, row.cr_namespace, row.cr_name) for row in rows]


def model_names(session: Session, *, created_before: datetime) -> list[str]:
    """Models in the allowlist whose row is older than `created_before`."""
    return list(
        session.execute(
            select(AgentModel.name)
            .where(AgentModel.created_at < created_before)
            .order_by(AgentModel.name)
        ).scalars()
    )


def tool_names(session: Session, *, created_before: datetime) -> list[str]:
    """Tools in the catalogue whose row is older than `created_before`."""
    return list(
        session.execute(
            select(Tool.name).where(Tool.created_at < created_before).order_by(Tool.name)
        ).scalars()
    )


def upsert_tool(
    session: Session,
    name: str,
    description: str | None,
    implementation: str,
    allowed: bool,
    *,
    uid: str | None = None,
) -> tuple[int, bool]:
    """The tool's row written: (its id, whether this created it); `uid`: its object's."""
    values = {
        "description": description,
        "implementation": implementation,
        "agents_allowed": allowed,
        "cr_uid": uid,
    }
    # `xmax = 0`: the row version is this INSERT's own, not an update of a conflicting row.
    row: tuple[int, bool] = (
        session.execute(
            insert(Tool)
            .values(name=name, **values)
            .on_conflict_do_update(index_elements=[Tool.name], set_=values)
            .returning(Tool.id, literal_column("xmax = 0"))
        )
        .tuples()
        .one()
    )
    return int(row[0]), bool(row[1])


def agents_awaiting_a_tool(session: Session, name: str) -> list[AgentRef]:
    """Agents of a CR whose last reconcile found `name` in their `spec.tools` and not in
    the catalogue (`UNKNOWN_TOOLS_KEY`): read again, they link to it."""
    rows = session.execute(
        select(Agent.id, Agent.cr_uid, Agent.cr_namespace, Agent.cr_name).where(
            Agent.cr_uid.is_not(None),
            # `?` of a JSON array: one of its strings.
            func.coalesce(Agent.meta[UNKNOWN_TOOLS_KEY].has_key(name), False),
        )
    ).all()
    return [AgentRef(row.id, row.cr_uid, row.cr_namespace, row.cr_name) for row in rows]


def tool_uid(session: Session, name: str) -> tuple[bool, str | None]:
    """(whether a tool of this name is in the catalogue, the uid of its object)."""
    row = session.execute(select(Tool.cr_uid).where(Tool.name == name).with_for_update()).first()
    return (row is not None, row.cr_uid if row is not None else None)


def delete_tool(session: Session, name: str) -> list[AgentRef] | None:
    """Delete the tool and its agent links; the agents keep running on the KS core
    (DESIGN §4). Returns the agents that were linked to it (None: no such tool): their
    CRs still name it, so read again they show it unknown and record it
    (`UNKNOWN_TOOLS_KEY`), and a tool created again under that name finds them.
    The row is locked first: a reconcile inserting a link to it holds its key (the
    foreign key's check), so this waits for that commit and then sees the link, and no
    link is added after."""
    tool_id = session.execute(
        select(Tool.id).where(Tool.name == name).with_for_update()
    ).scalar_one_or_none()
    if tool_id is None:
        return None
    unlinked = (
        delete(AgentToolLink)
        .where(AgentToolLink.tool_id == tool_id)
        .returning(AgentToolLink.agent_id)
        .cte("unlinked")
    )
    rows = session.execute(
        select(Agent.id, Agent.cr_uid, Agent.cr_namespace, Agent.cr_name)
        .join(unlinked, unlinked.c.agent_id == Agent.id)
        .order_by(Agent.id)
    ).all()
    session.execute(delete(Tool).where(Tool.id == tool_id))
    return [AgentRef(row.id, row.cr_uid, row.cr_namespace, row.cr_name) for row in rows]
