"""People's side of approvals (issue 38): the owner approves or rejects a call an agent
asked, from the web inbox, the HTTP API or the CLI (one home for the rule).

A decision is one transaction: the approval's guarded UPDATE (only a `pending` one not
past its expiry), and the inbox reply that records it on the item (`approved` /
`rejected: <note>`), so the board shows who decided and when, as for any reply. Then,
committed, a run of the agent is requested (the annotation, as a reply's wake): an
approval is the owner's request to act, so it wakes the agent whatever its
`wakeOnReply`. A request that cannot be delivered is reported and undoes nothing: the
next run of the agent (scheduled, manual, a wake) makes the approved call at its start.

What is executed is what was shown: the stored arguments, never an edit. An owner who
wants other arguments rejects, and the agent asks again (a new approval).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from achilles.db.database import Database
from achilles.db.inbox import people, replies
from achilles.db.inbox import settings as inbox_settings
from achilles.db.tools import approvals
from achilles.db.tools.approvals import Approval as Approval  # re-exported for the API
from achilles.domain.inbox import ReplyChannel, ReplyKind
from achilles.domain.mcp_tools import ApprovalState
from achilles.errors import ClusterUnavailable, InvalidInputError, NotFound

if TYPE_CHECKING:
    from achilles.services.run_requests import RunRequester

MAX_NOTE_LENGTH = 2_000


class Decision(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"


class DecisionRefusal(StrEnum):
    """Why a decision was not written (nothing changed)."""

    ALREADY_DECIDED = "already_decided"
    EXPIRED = "expired"


@dataclass(frozen=True)
class DecisionReceipt:
    approval: Approval  # after the decision (as found, when refused)
    refusal: DecisionRefusal | None = None
    wake_requested: bool = False
    wake_detail: str | None = None  # why a wanted wake was not delivered

    @property
    def accepted(self) -> bool:
        return self.refusal is None


def approval_of_item(database: Database, item_id: int, *, owner_key: str | None) -> Approval:
    """The approval an inbox item asks (NotFound: no such item of this owner, or an item
    that asks no approval)."""
    with database.transaction() as session:
        if owner_key is not None and people.item_owner(session, item_id) != owner_key:
            raise NotFound(f"inbox item {item_id} does not exist")
        found = approvals.approval_by_item(session, item_id)
    if found is None:
        raise NotFound(f"inbox item {item_id} asks no approval")
    return found


def decide(
    database: Database,
    item_id: int,
    decision: Decision,
    *,
    requester: RunRequester | None,
    by: str | None = None,
    note: str | None = None,
    owner_key: str | None = None,
) -> DecisionReceipt:
    """Approve or reject the call inbox item `item_id` asks; then wake the agent."""
    if note is not None and len(note) > MAX_NOTE_LENGTH:
        raise InvalidInputError(f"note: at most {MAX_NOTE_LENGTH} characters")
    approve = decision is Decision.APPROVE
    with database.transaction() as session:
        if owner_key is not None and people.item_owner(session, item_id) != owner_key:
            raise NotFound(f"inbox item {item_id} does not exist")
        found = approvals.approval_by_item(session, item_id, lock=True)
        if found is None:
            raise NotFound(f"inbox item {item_id} asks no approval")
        if not approvals.decide(session, found.id, approve=approve, by=by):
            refusal = (
                DecisionRefusal.EXPIRED
                if found.state is ApprovalState.PENDING
                else DecisionRefusal.ALREADY_DECIDED
            )
            return DecisionReceipt(approval=found, refusal=refusal)
        text = "approved" if approve else "rejected"
        if note:
            text = f"{text}: {note.strip()}"
        written = replies.write_reply(
            session, item_id, text, ReplyKind.ANSWER, ReplyChannel.INBOX, by=by
        )
        agent = inbox_settings.load_inbox_settings(session, found.agent_id)
        decided = approvals.approval_by_item(session, item_id)
        assert decided is not None
    at = written.item.reply.handled_at if written.item.reply is not None else None
    detail = _wake(agent, at, requester)
    return DecisionReceipt(approval=decided, wake_requested=detail is None, wake_detail=detail)


def _wake(
    agent: inbox_settings.AgentInboxSettings, at: datetime | None, requester: RunRequester | None
) -> str | None:
    """Request a run of the agent; None when delivered, else why not."""
    if requester is None or at is None:
        return "no run requested: the next run of the agent makes the approved call"
    if not (agent.cr_namespace and agent.cr_name):
        return "the agent has no Agent resource on record; start a run with `achilles runs enqueue`"
    try:
        requester.request(agent.cr_namespace, agent.cr_name, at)
    except ClusterUnavailable:
        return "run not requested: the cluster's API server cannot be reached right now"
    except NotFound as exc:
        return f"run not requested: {exc}"
    return None
