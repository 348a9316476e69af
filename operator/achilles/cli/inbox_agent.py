"""`achilles inbox agent …`: act as an agent on its board, from the command line.

Agents normally act through their inbox tools during a run; operators need
the same acts for demos, repairs and checks from outside (setting up
questions, draining replies). Each command is one call of `achilles.services.inbox`,
which owns its transaction.

Exit codes: 0 written (or already so); 3 the rules refused the write and
nothing changed (a compare-and-swap conflict, a forbidden move, a reply still
to acknowledge, an acknowledgement of a superseded or untaken reply); 1 failed
(not found, no such reply, database unreachable); 2 malformed input.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from achilles.cli.common import (
    CommandFailed,
    WholeNumber,
    database_url_option,
    echo_json,
    reports_errors,
)
from achilles.domain.inbox import AckStatus, ItemState
from achilles.errors import (
    InboxConflict,
    InboxReplyPending,
    InboxVersionRequired,
    InvalidInboxTransition,
)

EXIT_REFUSED = 3
_STATES = click.Choice([s.value for s in ItemState])
_REFUSALS = (InboxConflict, InboxReplyPending, InvalidInboxTransition, InboxVersionRequired)


@click.group("agent")
def agent() -> None:
    """Act as an agent on its board (for operators, demos and checks)."""


def _emit(record: dict[str, Any], line: str, as_json: bool) -> None:
    if as_json:
        echo_json(record)
    else:
        click.echo(line)


def _refused(error: Exception, as_json: bool) -> None:
    record: dict[str, Any] = {"refused": type(error).__name__, "message": str(error)}
    if isinstance(error, InboxConflict):
        record.update(
            current_revision=error.current_revision,
            current_board_version=error.current_board_version,
        )
    if isinstance(error, InboxVersionRequired):
        record.update(current_revision=error.revision, current_board_version=error.board_version)
    _emit(record, f"refused: {error}", as_json)
    sys.exit(EXIT_REFUSED)


@agent.command("ask")
@database_url_option
@click.argument("agent_ref", metavar="AGENT")
@click.option("--key", required=True, help="The question's stable key (same key, same row).")
@click.option("--question", required=True)
@click.option("--context")
@click.option(
    "--state",
    type=_STATES,
    default=None,
    help="Move the item to this state  [default: blocked for a new item; an existing one"
    " keeps its state]",
)
@click.option(
    "--revision",
    type=WholeNumber(min=1),
    default=None,
    help="As last read; needed to change an existing item's state.",
)
@click.option(
    "--board-version",
    type=WholeNumber(min=0),
    default=None,
    help="As last read; needed to change an existing item's state.",
)
@click.option("--json", "as_json", is_flag=True)
@reports_errors
def ask(
    database_url: str | None,
    agent_ref: str,
    key: str,
    question: str,
    context: str | None,
    state: str | None,
    revision: int | None,
    board_version: int | None,
    as_json: bool,
) -> None:
    """Ask a question on AGENT's board, or update the one under KEY.

    The same question again writes nothing, whatever state the item is in; pass --state
    with --revision and --board-version as last read to move it (e.g. `--state blocked`
    to ask a closed question again): a change of state is versioned, like `advance`.
    """
    from achilles.cli.common import open_database
    from achilles.domain.inbox_records import item_record
    from achilles.services import inbox as service

    try:
        result = service.ask(
            open_database(database_url),
            agent_ref,
            key,
            question,
            context,
            ItemState(state) if state is not None else None,
            expected_revision=revision,
            board_version=board_version,
        )
    except _REFUSALS as refused:
        _refused(refused, as_json)
        return
    verb = "created" if result.created else "updated" if result.changed else "unchanged"
    _emit(
        {**item_record(result.item, board_version=result.board_version), "result": verb},
        f"item {result.item.id} {verb}: revision {result.item.revision},"
        f" board version {result.board_version}",
        as_json,
    )


@agent.command("take")
@database_url_option
@click.argument("item_id", metavar="ITEM", type=WholeNumber(min=1))
@click.option("--json", "as_json", is_flag=True)
@reports_errors
def take(database_url: str | None, item_id: int, as_json: bool) -> None:
    """Take ITEM's unprocessed reply (marks it seen; idempotent)."""
    from achilles.cli.common import open_database
    from achilles.domain.inbox_records import item_record
    from achilles.services import inbox as service

    item = service.take_reply(open_database(database_url), item_id)
    if item is None or item.reply is None:
        _emit({"taken": False, "item_id": item_id}, f"item {item_id}: nothing to take", as_json)
        return
    _emit(
        {"taken": True, "item": item_record(item)},
        f"item {item_id}: took reply #{item.reply.serial}: {item.reply.text}",
        as_json,
    )


@agent.command("ack")
@database_url_option
@click.argument("item_id", metavar="ITEM", type=WholeNumber(min=1))
@click.option("--serial", type=WholeNumber(min=1), required=True, help="The reply taken.")
@click.option("--outcome", required=True, help="What the agent did with the reply.")
@click.option("--json", "as_json", is_flag=True)
@reports_errors
def ack(database_url: str | None, item_id: int, serial: int, outcome: str, as_json: bool) -> None:
    """Acknowledge reply SERIAL of ITEM with an outcome."""
    from achilles.cli.common import open_database
    from achilles.domain.inbox_records import item_record
    from achilles.services import inbox as service

    result = service.acknowledge(open_database(database_url), item_id, serial, outcome)
    if result.status is AckStatus.NO_SUCH_REPLY:
        latest = result.item.reply.serial if result.item.reply else None
        raise CommandFailed(
            f"item {item_id} has no reply #{serial}"
            + (f" (its latest is #{latest})" if latest else " (nobody has replied yet)")
        )
    _emit(
        {"status": result.status.value, "item": item_record(result.item)},
        f"item {item_id}, reply #{serial}: {result.status.value}",
        as_json,
    )
    if result.status in (AckStatus.SUPERSEDED, AckStatus.NOT_TAKEN):
        sys.exit(EXIT_REFUSED)


@agent.command("advance")
@database_url_option
@click.argument("item_id", metavar="ITEM", type=WholeNumber(min=1))
@click.option("--revision", type=WholeNumber(min=1), required=True, help="As last read.")
@click.option("--board-version", type=WholeNumber(min=0), required=True, help="As last read.")
@click.option("--state", type=_STATES, required=True, help="The state to move to.")
@click.option("--context", help="Replaces the item's context.")
@click.option("--json", "as_json", is_flag=True)
@reports_errors
def advance(
    database_url: str | None,
    item_id: int,
    revision: int,
    board_version: int,
    state: str,
    context: str | None,
    as_json: bool,
) -> None:
    """`board_advance`: move ITEM iff its revision and the board version are unchanged."""
    from achilles.cli.common import open_database
    from achilles.domain.inbox_records import item_record
    from achilles.services import inbox as service

    try:
        result = service.advance(
            open_database(database_url),
            item_id,
            expected_revision=revision,
            board_version=board_version,
            target=ItemState(state),
            context=context,
        )
    except _REFUSALS as refused:
        _refused(refused, as_json)
        return
    _emit(
        item_record(result.item, board_version=result.board_version),
        f"item {item_id} is {result.item.state.value}: revision {result.item.revision},"
        f" board version {result.board_version}",
        as_json,
    )
