"""Checks a concurrent history of inbox writes against the rules, pure.

Parallel writers cannot know in which order the database serialised them, but
every revision-bumping write reports the revision it produced, and every reply
the serial it got. Those numbers are the serial order per item; this module
checks the writers' own results and the final rows against the rules of
`achilles.domain.inbox` along that order:

- compare-and-swap: no two writes produced the same revision or board version,
  the produced numbers are exactly the range the final row shows (nothing lost),
  no two advances won with the same expected revision or board version;
- inbox replies are always accepted; every accepted reply got the next serial;
  the final reply is the one with the highest serial;
- no chat reply was written over a reply nobody had taken;
- outcomes belong to the reply that was taken and acknowledged; an unprocessed
  reply (crashed agent) is exactly what the unprocessed-replies query finds.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from achilles.domain.inbox import AckStatus, InboxItem, ItemState, has_unprocessed_reply


class Op(StrEnum):
    ASK = "ask"
    ADVANCE = "advance"
    INBOX_REPLY = "inbox_reply"
    CHAT_REPLY = "chat_reply"
    TAKE = "take"
    ACK = "ack"


@dataclass(frozen=True)
class Event:
    """One committed operation and what the writer was told."""

    op: Op
    item_id: int
    agent_id: int
    ok: bool  # wrote: reply accepted, advance won, ask changed, reply taken, ack acknowledged
    revision: int | None = None  # the revision this write produced (or that a take/ack saw)
    board_version: int | None = None  # the board version this write produced
    serial: int | None = None  # reply serial written, taken or acknowledged
    text: str | None = None  # reply text or outcome
    expected_revision: int | None = None  # advance only
    expected_board_version: int | None = None  # advance only
    state: ItemState | None = None  # the item's state after the write
    detail: str = ""  # refusal reason, ack status


@dataclass(frozen=True)
class Snapshot:
    items: Mapping[int, InboxItem]
    board_versions: Mapping[int, int]  # agent id -> board_version


_BUMPS = {Op.ASK, Op.ADVANCE, Op.INBOX_REPLY, Op.CHAT_REPLY}


def check_history(
    before: Snapshot, events: Iterable[Event], after: Snapshot, unprocessed: set[int]
) -> list[str]:
    """Every violation of the rules found in this history (empty: none)."""
    events = list(events)
    problems: list[str] = []
    by_item: dict[int, list[Event]] = defaultdict(list)
    for event in events:
        by_item[event.item_id].append(event)
    for item_id, final in after.items.items():
        start = before.items.get(item_id)
        problems += _check_item(start, final, by_item.get(item_id, []))
    problems += _check_boards(before, after, events)
    expected_unprocessed = {i for i, item in after.items.items() if has_unprocessed_reply(item)}
    if unprocessed != expected_unprocessed:
        problems.append(
            f"the unprocessed replies found {sorted(unprocessed)},"
            f" the rows say {sorted(expected_unprocessed)}"
        )
    return problems


def _check_item(start: InboxItem | None, final: InboxItem, events: list[Event]) -> list[str]:
    name = f"item {final.id}"
    problems: list[str] = []
    bumps = [e for e in events if e.op in _BUMPS and e.ok]
    revisions = sorted(e.revision or 0 for e in bumps)
    first = start.revision + 1 if start else 1
    if revisions != list(range(first, final.revision + 1)):
        problems.append(
            f"{name}: writes produced revisions {revisions},"
            f" expected each of {first}..{final.revision} exactly once"
        )
    problems += _check_cas(name, [e for e in events if e.op is Op.ADVANCE])
    last_state_change = max(
        (e for e in bumps if e.op in (Op.ASK, Op.ADVANCE)),
        key=lambda e: e.revision or 0,
        default=None,
    )
    expected_state = last_state_change.state if last_state_change else (start and start.state)
    if expected_state is not None and final.state is not expected_state:
        problems.append(
            f"{name}: final state {final.state}, last state write said {expected_state}"
        )
    problems += _check_replies(name, start, final, events)
    return problems


def _check_cas(name: str, advances: list[Event]) -> list[str]:
    problems: list[str] = []
    won = [e for e in advances if e.ok]
    problems += [
        f"{name}: {n} advances won from the same revision {revision}"
        for revision, n in Counter(e.expected_revision for e in won).items()
        if n > 1
    ]
    for event in won:
        if event.revision != (event.expected_revision or 0) + 1:
            problems.append(
                f"{name}: advance from revision {event.expected_revision}"
                f" produced revision {event.revision}"
            )
        if event.board_version != (event.expected_board_version or 0) + 1:
            problems.append(
                f"{name}: advance from board version {event.expected_board_version}"
                f" produced board version {event.board_version}"
            )
    return problems


def _check_replies(
    name: str, start: InboxItem | None, final: InboxItem, events: list[Event]
) -> list[str]:
    problems: list[str] = []
    replies = [e for e in events if e.op in (Op.INBOX_REPLY, Op.CHAT_REPLY)]
    problems += [
        f"{name}: an inbox reply was refused ({e.detail})"
        for e in replies
        if e.op is Op.INBOX_REPLY and not e.ok
    ]
    accepted = sorted((e for e in replies if e.ok), key=lambda e: e.serial or 0)
    first_serial = start.reply_serial + 1 if start else 1
    serials = [e.serial for e in accepted]
    if serials != list(range(first_serial, final.reply_serial + 1)):
        problems.append(
            f"{name}: accepted replies got serials {serials},"
            f" expected {first_serial}..{final.reply_serial} once each"
        )
    by_revision = sorted(accepted, key=lambda e: e.revision or 0)
    if [e.serial for e in by_revision] != serials:
        problems.append(f"{name}: reply serials and revisions disagree on the order")
    if accepted and final.reply and accepted[-1].text != final.reply.text:
        problems.append(
            f"{name}: final reply {final.reply.text!r} is not the last accepted one"
            f" ({accepted[-1].text!r}) — a reply was lost"
        )
    taken = {e.serial for e in events if e.op is Op.TAKE and e.ok}
    if start and start.reply and start.reply.seen_at is not None:
        taken.add(start.reply_serial)
    for event in accepted:
        serial = event.serial or 0
        if event.op is Op.CHAT_REPLY and serial > 1 and serial - 1 not in taken:
            problems.append(
                f"{name}: chat reply (serial {serial}) replaced reply {serial - 1},"
                " which nobody had taken"
            )
    known = {e.serial for e in accepted} | (
        {start.reply_serial} if start and start.reply else set()
    )
    problems += [
        f"{name}: a take returned serial {s}, which no accepted reply has" for s in taken - known
    ]
    problems += _check_outcomes(name, final, events, taken)
    return problems


def _check_outcomes(
    name: str, final: InboxItem, events: list[Event], taken: set[int | None]
) -> list[str]:
    problems: list[str] = []
    acked = [e for e in events if e.op is Op.ACK and e.detail == AckStatus.ACKNOWLEDGED]
    counts = Counter(e.serial for e in acked)
    problems += [f"{name}: reply {s} acknowledged {n} times" for s, n in counts.items() if n > 1]
    problems += [
        f"{name}: reply {e.serial} acknowledged but never taken"
        for e in acked
        if e.serial not in taken
    ]
    reply = final.reply
    if reply is None:
        return problems
    final_acks = [e for e in acked if e.serial == reply.serial]
    if reply.outcome is not None and [e.text for e in final_acks] != [reply.outcome]:
        problems.append(f"{name}: outcome {reply.outcome!r} was not acknowledged for this reply")
    if reply.outcome is None and final_acks:
        problems.append(f"{name}: the current reply was acknowledged but has no outcome")
    if (reply.seen_at is not None) != (reply.serial in taken):
        problems.append(
            f"{name}: reply_seen_at is {'set' if reply.seen_at else 'empty'} but the reply"
            f" was{'' if reply.serial in taken else ' never'} taken"
        )
    return problems


def _check_boards(before: Snapshot, after: Snapshot, events: list[Event]) -> list[str]:
    problems: list[str] = []
    produced: dict[int, list[int]] = defaultdict(list)
    won_from: dict[int, list[int]] = defaultdict(list)
    for event in events:
        if event.op in _BUMPS and event.ok and event.board_version is not None:
            produced[event.agent_id].append(event.board_version)
        if event.op is Op.ADVANCE and event.ok and event.expected_board_version is not None:
            won_from[event.agent_id].append(event.expected_board_version)
    for agent_id, final_version in after.board_versions.items():
        start = before.board_versions.get(agent_id, 0)
        if sorted(produced[agent_id]) != list(range(start + 1, final_version + 1)):
            problems.append(
                f"board of agent {agent_id}: writes produced versions"
                f" {sorted(produced[agent_id])}, expected {start + 1}..{final_version} once each"
            )
        for version, n in Counter(won_from[agent_id]).items():
            if n > 1:
                problems.append(
                    f"board of agent {agent_id}: {n} advances won from board version {version}"
                )
    return problems
