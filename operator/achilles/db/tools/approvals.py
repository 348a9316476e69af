"""Queries of `tool_approvals`: a call that waits for its owner, decided, then performed once.

The caller owns the transaction. Every change of state is one guarded UPDATE on the state
it expects, so two writers never both win: a decision only of a `pending` approval not
past its expiry; the claim of an `approved` one (`executing`, with the claiming run) is
what lets exactly one run perform the call, however many runs (retries, two operator
replicas' wakes) reach it; its outcome only by the run that claimed it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, or_, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from achilles.db.journal.models import AgentRun, Tool
from achilles.db.tools.models import OPEN_APPROVAL_PREDICATE, ToolApproval
from achilles.domain.mcp_tools import ApprovalState
from achilles.domain.runs import RunState


@dataclass(frozen=True)
class Approval:
    id: int
    agent_id: int
    tool_id: int
    tool_name: str  # the AgentTool's
    item_id: int
    mcp_tool: str
    arguments: dict[str, Any]
    arguments_sha256: bytes
    reason: str | None
    state: ApprovalState
    expires_at: datetime
    decided_at: datetime | None
    decided_by: str | None
    executed_by_run_id: int | None
    executed_at: datetime | None
    result: str | None
    result_error: str | None
    reported_at: datetime | None
    created_at: datetime


def _select() -> Any:
    return select(ToolApproval, Tool.name).join(Tool, Tool.id == ToolApproval.tool_id)


def _approval(row: Any) -> Approval:
    approval: ToolApproval = row[0]
    return Approval(
        id=approval.id,
        agent_id=approval.agent_id,
        tool_id=approval.tool_id,
        tool_name=row[1],
        item_id=approval.item_id,
        mcp_tool=approval.mcp_tool,
        arguments=dict(approval.arguments),
        arguments_sha256=bytes(approval.arguments_sha256),
        reason=approval.reason,
        state=ApprovalState(approval.state),
        expires_at=approval.expires_at,
        decided_at=approval.decided_at,
        decided_by=approval.decided_by,
        executed_by_run_id=approval.executed_by_run_id,
        executed_at=approval.executed_at,
        result=approval.result,
        result_error=approval.result_error,
        reported_at=approval.reported_at,
        created_at=approval.created_at,
    )


def open_approval(
    session: Session, agent_id: int, tool_id: int, mcp_tool: str, digest: bytes
) -> Approval | None:
    """The call's approval still open (pending, approved or executing), if any."""
    row = session.execute(
        _select().where(
            ToolApproval.agent_id == agent_id,
            ToolApproval.tool_id == tool_id,
            ToolApproval.mcp_tool == mcp_tool,
            ToolApproval.arguments_sha256 == digest,
            ToolApproval.state.in_([state.value for state in _OPEN_STATES]),
        )
    ).first()
    return None if row is None else _approval(row)


_OPEN_STATES = (ApprovalState.PENDING, ApprovalState.APPROVED, ApprovalState.EXECUTING)


def create_approval(
    session: Session,
    *,
    agent_id: int,
    tool_id: int,
    item_id: int,
    mcp_tool: str,
    arguments: dict[str, Any],
    digest: bytes,
    reason: str | None,
    run_id: int,
    expires_at: datetime,
) -> int | None:
    """A new pending approval; None when the call already has an open one (the partial
    unique index: two asks of one call make one approval)."""
    created = session.execute(
        insert(ToolApproval)
        .values(
            agent_id=agent_id,
            tool_id=tool_id,
            item_id=item_id,
            mcp_tool=mcp_tool,
            arguments=arguments,
            arguments_sha256=digest,
            reason=reason,
            asked_by_run_id=run_id,
            state=ApprovalState.PENDING.value,
            expires_at=expires_at,
        )
        .on_conflict_do_nothing(
            index_elements=["agent_id", "tool_id", "mcp_tool", "arguments_sha256"],
            index_where=_open_predicate(),
        )
        .returning(ToolApproval.id)
    ).scalar_one_or_none()
    return None if created is None else int(created)


def _open_predicate() -> Any:
    return text(OPEN_APPROVAL_PREDICATE)


def count_asked(session: Session, agent_id: int, tool_id: int, mcp_tool: str, digest: bytes) -> int:
    """How many approvals of this call the agent ever asked (each has an item of its own)."""
    return int(
        session.execute(
            select(func.count()).where(
                ToolApproval.agent_id == agent_id,
                ToolApproval.tool_id == tool_id,
                ToolApproval.mcp_tool == mcp_tool,
                ToolApproval.arguments_sha256 == digest,
            )
        ).scalar_one()
    )


def has_approvals_owed(session: Session, agent_id: int) -> bool:
    """Whether a run of the agent has approvals to settle at its start: one still open
    (pending, approved, executing) or an outcome the agent has not heard."""
    owed = select(ToolApproval.id).where(
        ToolApproval.agent_id == agent_id,
        or_(
            ToolApproval.state.in_([state.value for state in _OPEN_STATES]),
            ToolApproval.reported_at.is_(None),
        ),
    )
    return bool(session.execute(select(owed.exists())).scalar())


def approval_by_item(session: Session, item_id: int, *, lock: bool = False) -> Approval | None:
    query = _select().where(ToolApproval.item_id == item_id)
    if lock:
        query = query.with_for_update(of=ToolApproval)
    row = session.execute(query).first()
    return None if row is None else _approval(row)


def approvals_by_items(session: Session, item_ids: list[int]) -> dict[int, Approval]:
    rows = session.execute(_select().where(ToolApproval.item_id.in_(item_ids))).all()
    return {row[0].item_id: _approval(row) for row in rows}


def decide(session: Session, approval_id: int, *, approve: bool, by: str | None) -> bool:
    """Approve or reject a pending approval not past its expiry; False when it was not
    pending any more (decided, expired) and nothing was written."""
    state = ApprovalState.APPROVED if approve else ApprovalState.REJECTED
    changed = session.execute(
        update(ToolApproval)
        .where(
            ToolApproval.id == approval_id,
            ToolApproval.state == ApprovalState.PENDING.value,
            ToolApproval.expires_at > func.now(),
        )
        .values(state=state.value, decided_at=func.now(), decided_by=by)
        .returning(ToolApproval.id)
    ).first()
    return changed is not None


def expire_due(session: Session, agent_id: int) -> int:
    """The agent's pending approvals past their expiry become `expired`; how many."""
    rows = session.execute(
        update(ToolApproval)
        .where(
            ToolApproval.agent_id == agent_id,
            ToolApproval.state == ApprovalState.PENDING.value,
            ToolApproval.expires_at <= func.now(),
        )
        .values(state=ApprovalState.EXPIRED.value, decided_at=func.now())
        .returning(ToolApproval.id)
    ).all()
    return len(rows)


def approved_of_agent(session: Session, agent_id: int) -> list[Approval]:
    rows = session.execute(
        _select()
        .where(
            ToolApproval.agent_id == agent_id,
            ToolApproval.state == ApprovalState.APPROVED.value,
        )
        .order_by(ToolApproval.decided_at, ToolApproval.id)
    ).all()
    return [_approval(row) for row in rows]


def claim(session: Session, approval_id: int, run_id: int) -> bool:
    """`approved -> executing` for `run_id`: True for the one claim that wins."""
    changed = session.execute(
        update(ToolApproval)
        .where(
            ToolApproval.id == approval_id,
            ToolApproval.state == ApprovalState.APPROVED.value,
        )
        .values(state=ApprovalState.EXECUTING.value, executed_by_run_id=run_id)
        .returning(ToolApproval.id)
    ).first()
    return changed is not None


def record_outcome(
    session: Session, approval_id: int, run_id: int, *, result: str | None, error: str | None
) -> bool:
    """The claimed call's outcome, by the run that claimed it."""
    state = ApprovalState.FAILED if error is not None else ApprovalState.EXECUTED
    changed = session.execute(
        update(ToolApproval)
        .where(
            ToolApproval.id == approval_id,
            ToolApproval.state == ApprovalState.EXECUTING.value,
            ToolApproval.executed_by_run_id == run_id,
        )
        .values(state=state.value, executed_at=func.now(), result=result, result_error=error)
        .returning(ToolApproval.id)
    ).first()
    return changed is not None


def fail_abandoned(session: Session, agent_id: int, run_id: int) -> int:
    """Calls claimed by a run of the agent that ended (or is gone) before it recorded the
    outcome: whether the server acted is unknown, and it is never made again."""
    running = select(AgentRun.id).where(
        AgentRun.id == ToolApproval.executed_by_run_id,
        AgentRun.state == RunState.RUNNING.value,
    )
    rows = session.execute(
        update(ToolApproval)
        .where(
            ToolApproval.agent_id == agent_id,
            ToolApproval.state == ApprovalState.EXECUTING.value,
            ToolApproval.executed_by_run_id != run_id,
            ~running.exists(),
        )
        .values(
            state=ApprovalState.FAILED.value,
            executed_at=func.now(),
            result_error="the run making the approved call ended before it recorded the"
            " outcome; whether the server acted is unknown, and the call is not made again",
        )
        .returning(ToolApproval.id)
    ).all()
    return len(rows)


def unreported(session: Session, agent_id: int) -> list[Approval]:
    """Outcomes the agent has not heard yet: decided against, expired, made or failed."""
    ended = (
        ApprovalState.REJECTED,
        ApprovalState.EXPIRED,
        ApprovalState.EXECUTED,
        ApprovalState.FAILED,
    )
    rows = session.execute(
        _select()
        .where(
            and_(
                ToolApproval.agent_id == agent_id,
                ToolApproval.state.in_([state.value for state in ended]),
                ToolApproval.reported_at.is_(None),
            )
        )
        .order_by(ToolApproval.id)
    ).all()
    return [_approval(row) for row in rows]


def mark_reported(session: Session, approval_ids: list[int]) -> None:
    if approval_ids:
        session.execute(
            update(ToolApproval)
            .where(ToolApproval.id.in_(approval_ids), ToolApproval.reported_at.is_(None))
            .values(reported_at=func.now())
        )
