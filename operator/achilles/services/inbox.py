"""The Agent Inbox's use cases from outside a run: people (the CLI now, the portal later)
and operators acting as an agent.

Each function is one act in one transaction of the given `Database`; the decisions are
the guarded statements of `achilles.db.inbox` (one each). What this layer adds is what
sits around them — above all that a human's reply may wake the agent: the reply is
committed first, then a run is requested through a `RunRequester`, and a request that
cannot be delivered is reported, never undoes the reply.

Agents act on their board through their tools (`achilles.tools.inbox`), inside the run's
own transactions.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from achilles.db.database import Database
from achilles.db.inbox import board, people, replies
from achilles.db.inbox import settings as inbox_settings
from achilles.db.inbox.board import AdvanceResult, AskResult
from achilles.db.inbox.board import ItemListing as ItemListing  # re-exported: the API's items
from achilles.db.inbox.people import QueuePosition as QueuePosition
from achilles.db.inbox.people import Revision as Revision
from achilles.db.inbox.replies import AckResult
from achilles.db.inbox.settings import AgentInboxSettings
from achilles.db.journal.agents import find_agent_id
from achilles.domain.inbox import InboxItem, ItemState, ReplyChannel, ReplyKind, ReplyRefusal
from achilles.domain.inbox_wake import should_request_run
from achilles.errors import ClusterUnavailable, NotFound

if TYPE_CHECKING:
    from achilles.services.idempotency import Once
    from achilles.services.run_requests import AgentSpecWriter, RunRequester

log = logging.getLogger("achilles.inbox")

# --- people ---


def list_items(
    database: Database,
    *,
    owner_key: str | None = None,
    agent_ref: str | None = None,
    states: Sequence[ItemState] = (),
    unprocessed_only: bool = False,
    limit: int = 200,
) -> list[ItemListing]:
    """Items oldest first, optionally of one owner or agent (id or name)."""
    with database.transaction() as session:
        agent_id = find_agent_id(session, agent_ref) if agent_ref else None
        return board.list_items(
            session,
            owner_key=owner_key,
            agent_id=agent_id,
            states=states,
            unprocessed_only=unprocessed_only,
            limit=limit,
        )


@dataclass(frozen=True)
class ItemDetails:
    listing: ItemListing
    board_version: int
    wake_on_reply: bool


def item_details(database: Database, item_id: int) -> ItemDetails:
    """One item with its agent and owner, its board's version and the wake setting."""
    with database.transaction() as session:
        found = board.list_items(session, item_id=item_id, limit=1)
        if not found:
            raise NotFound(f"inbox item {item_id} does not exist")
        listing = found[0]
        _, board_version = board.get_item_and_board_version(session, item_id)
        agent = inbox_settings.load_inbox_settings(session, listing.item.agent_id)
    return ItemDetails(
        listing=listing, board_version=board_version, wake_on_reply=agent.settings.wake_on_reply
    )


def owner_inbox(
    database: Database,
    owner_key: str,
    *,
    states: Sequence[ItemState] = (),
    agent_ref: str | None = None,
    after: QueuePosition | None = None,
    limit: int,
) -> list[ItemListing]:
    """The owner's items across their agents, blocked first, one keyset page.
    `agent_ref` (`namespace/name` or id) must be one of the owner's agents (else
    `NotFound`, as for an agent that does not exist). Reads without a transaction (no
    common snapshot needed): the API's hottest read, one statement without `agent_ref`."""
    with database.reads() as connection:
        agent_id = None
        if agent_ref is not None:
            agent_id = people.owner_agent_id(connection, owner_key, agent_ref)
            if agent_id is None:
                raise NotFound(f"agent {agent_ref!r} does not exist")
        return people.owner_queue(
            connection, owner_key, states=states, agent_id=agent_id, after=after, limit=limit
        )


@dataclass(frozen=True)
class ItemHistory:
    details: ItemDetails
    revisions: list[Revision]


def item_history(database: Database, item_id: int, *, owner_key: str | None) -> ItemHistory:
    """One item, its board's version and its revisions (who replied, when, how), from one
    snapshot; with `owner_key`, only that owner's item (else `NotFound`, as if missing)."""
    with database.transaction() as session:
        found = board.list_items(session, item_id=item_id, limit=1)
        if not found or (owner_key is not None and found[0].owner_key != owner_key):
            raise NotFound(f"inbox item {item_id} does not exist")
        listing = found[0]
        _, board_version = board.get_item_and_board_version(session, item_id)
        agent = inbox_settings.load_inbox_settings(session, listing.item.agent_id)
        revisions = people.item_history(session, item_id)
    details = ItemDetails(
        listing=listing, board_version=board_version, wake_on_reply=agent.settings.wake_on_reply
    )
    return ItemHistory(details=details, revisions=revisions)


@dataclass(frozen=True)
class WakeOutcome:
    """What became of waking the agent after a reply."""

    # The owner allows replies to wake the agent, and this reply unblocked it.
    requested: bool
    delivered: bool = False
    agent_resource: str | None = None  # "namespace/name" of the Agent asked to run
    request: str | None = None  # the run request's value, when delivered
    detail: str | None = None  # why a requested wake was not delivered


@dataclass(frozen=True)
class ReplyReceipt:
    item: InboxItem
    board_version: int
    wake: WakeOutcome
    refusal: ReplyRefusal | None = None  # None: the reply was written

    @property
    def accepted(self) -> bool:
        return self.refusal is None


def reply(
    database: Database,
    item_id: int,
    text: str,
    *,
    kind: ReplyKind = ReplyKind.ANSWER,
    channel: ReplyChannel = ReplyChannel.INBOX,
    requester: RunRequester,
    expected_revision: int | None = None,
    by: str | None = None,
    owner_key: str | None = None,
    once: Once[ReplyReceipt] | None = None,
) -> ReplyReceipt:
    """A human's reply (inbox replies always land; chat replies only over a taken reply),
    then, when the owner allows it and the reply unblocked the agent, a run request.

    `expected_revision`: write only over that revision (else refused, `STALE_REVISION`);
    `by`: who replied; `owner_key`: the item must be that owner's (else `NotFound`, as
    for a missing item); `once`: an idempotency key, claimed and answered in the reply's
    transaction (`achilles.services.idempotency`)."""
    with database.transaction() as session:
        if once is not None:
            once.claim(session)
        if owner_key is not None and people.item_owner(session, item_id) != owner_key:
            raise NotFound(f"inbox item {item_id} does not exist")
        written = replies.write_reply(
            session, item_id, text, kind, channel, expected_revision=expected_revision, by=by
        )
        agent = inbox_settings.load_inbox_settings(session, written.item.agent_id)
        wanted = written.accepted and should_request_run(written.item.state, agent.settings)
        receipt = ReplyReceipt(
            item=written.item,
            board_version=written.board_version,
            wake=WakeOutcome(requested=wanted),
            refusal=written.refusal,
        )
        if once is not None:
            once.record(session, receipt)
    # Committed: whatever happens to the wake request, the reply stands.
    if wanted:
        assert written.item.reply is not None  # accepted: the item holds this reply
        receipt = replace(receipt, wake=_wake(agent, written.item.reply.handled_at, requester))
        if once is not None:
            once.amend(database, receipt)
    return receipt


def _wake(agent: AgentInboxSettings, at: datetime, requester: RunRequester) -> WakeOutcome:
    if not (agent.cr_namespace and agent.cr_name):
        return WakeOutcome(
            requested=True,
            detail="the agent has no Agent resource on record;"
            " start a run with `achilles runs enqueue`",
        )
    resource = f"{agent.cr_namespace}/{agent.cr_name}"
    try:
        value = requester.request(agent.cr_namespace, agent.cr_name, at)
    except ClusterUnavailable as exc:
        # The client's text (the API server's address) is for the log, not for the
        # person replying (issue 37).
        log.warning("wake of %s not delivered: %s", resource, exc)
        return WakeOutcome(
            requested=True,
            agent_resource=resource,
            detail="run not requested: the cluster's API server cannot be reached right now",
        )
    except NotFound as exc:
        return WakeOutcome(
            requested=True, agent_resource=resource, detail=f"run not requested: {exc}"
        )
    return WakeOutcome(requested=True, delivered=True, agent_resource=resource, request=value)


@dataclass(frozen=True)
class WakeSetting:
    agent_id: int
    wake_on_reply: bool
    # The Agent resource whose spec.wakeOnReply was written too (it wins over the row:
    # the operator mirrors it at every event), and why it was not, when it was not.
    agent_resource: str | None = None
    resource_written: bool = False
    detail: str | None = None


def wake_on_reply(
    database: Database,
    agent_ref: str,
    enabled: bool | None = None,
    *,
    spec_writer: AgentSpecWriter | None = None,
) -> WakeSetting:
    """The owner's wake-on-reply switch of an agent: set it (`enabled`), or only read it.

    Setting it writes the row and, for an agent with an Agent resource, that resource's
    `spec.wakeOnReply` through `spec_writer` (the spec is what the portal edits and what
    the operator mirrors into the row). A write the cluster refuses is reported in
    `detail`; the row is written either way."""
    with database.transaction() as session:
        agent_id = find_agent_id(session, agent_ref)
        if enabled is None:
            settings = inbox_settings.load_inbox_settings(session, agent_id).settings
        else:
            settings = inbox_settings.set_wake_on_reply(session, agent_id, enabled)
        agent = inbox_settings.load_inbox_settings(session, agent_id)
    setting = WakeSetting(agent_id=agent_id, wake_on_reply=settings.wake_on_reply)
    if enabled is None or spec_writer is None or not (agent.cr_namespace and agent.cr_name):
        return setting
    resource = f"{agent.cr_namespace}/{agent.cr_name}"
    try:
        spec_writer.write(agent.cr_namespace, agent.cr_name, {"wakeOnReply": enabled})
    except (ClusterUnavailable, NotFound) as exc:
        return replace(setting, agent_resource=resource, detail=f"spec not written: {exc}")
    return replace(setting, agent_resource=resource, resource_written=True)


# --- acting as an agent, from outside a run (operators, demos, checks) ---


def ask(
    database: Database,
    agent_ref: str,
    key: str,
    question: str,
    context: str | None = None,
    state: ItemState | None = None,
    *,
    expected_revision: int | None = None,
    board_version: int | None = None,
) -> AskResult:
    """Ask, or re-ask under `key`; `state=None` keeps an existing item's state (a new item
    is blocked), so the same question asked again writes nothing whatever its state. A
    change of an existing item's state needs the versions read (`board.ask`)."""
    with database.transaction() as session:
        agent_id = find_agent_id(session, agent_ref)
        return board.ask(
            session,
            agent_id,
            key,
            question,
            context,
            state,
            expected_revision=expected_revision,
            board_version=board_version,
        )


def take_reply(database: Database, item_id: int) -> InboxItem | None:
    with database.transaction() as session:
        return replies.take_reply(session, item_id)


def acknowledge(database: Database, item_id: int, reply_serial: int, outcome: str) -> AckResult:
    with database.transaction() as session:
        return replies.acknowledge(session, item_id, reply_serial, outcome)


def advance(
    database: Database,
    item_id: int,
    *,
    expected_revision: int,
    board_version: int,
    target: ItemState,
    context: str | None = None,
) -> AdvanceResult:
    with database.transaction() as session:
        return board.board_advance(
            session,
            item_id,
            expected_revision=expected_revision,
            board_version=board_version,
            target=target,
            context=context,
        )
