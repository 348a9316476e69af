"""`achilles inbox`: the human side of the Agent Inbox (seed 003, DESIGN.md §5).

Exit codes of `reply`: 0 the reply was written; 3 a chat reply was refused by
the chat rule (the agent has not taken the current reply yet: nothing was
written, and that is not an error); 1 the request failed (no such item,
database unreachable); 2 malformed input. A wake request that cannot reach the
cluster is reported but does not change the exit code: the reply is committed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from achilles.cli.common import (
    database_url_option,
    echo_json,
    echo_table,
    reports_errors,
)
from achilles.cli.inbox_agent import agent
from achilles.cli.inbox_race import race
from achilles.domain.inbox import ItemState, ReplyChannel, ReplyKind

if TYPE_CHECKING:
    from achilles.inbox.service import ItemListing, ReplyReceipt

# `reply`: a chat reply refused by the chat rule (nothing written; not an error).
EXIT_CHAT_REFUSED = 3
_QUESTION_WIDTH = 60


@click.group()
def inbox() -> None:
    """The Agent Inbox: questions agents asked people, and people's replies."""


inbox.add_command(agent)
inbox.add_command(race)


def _listing_record(listing: ItemListing) -> dict[str, Any]:
    from achilles.inbox.presentation import item_record

    return {**item_record(listing.item), "agent": listing.agent_name, "owner": listing.owner_key}


def _short(text: str, width: int = _QUESTION_WIDTH) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


@inbox.command("list")
@database_url_option
@click.option("--owner", metavar="USER", help="Only agents of this owner (user key).")
@click.option("--agent", "agent_ref", metavar="ID|NAME", help="Only this agent's items.")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice([s.value for s in ItemState]),
    help="Only items in this state (repeatable).",
)
@click.option(
    "--unprocessed", is_flag=True, help="Only items answered but not processed by the agent."
)
@click.option("--limit", default=200, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@reports_errors
def list_items(
    database_url: str | None,
    owner: str | None,
    agent_ref: str | None,
    states: tuple[str, ...],
    unprocessed: bool,
    limit: int,
    as_json: bool,
) -> None:
    """List inbox items, oldest first."""
    from achilles.cli.common import open_database
    from achilles.db.journal.agents import find_agent_id
    from achilles.inbox import service

    with open_database(database_url).transaction() as session:
        agent_id = find_agent_id(session, agent_ref) if agent_ref else None
        listings = service.list_items(
            session,
            owner_key=owner,
            agent_id=agent_id,
            states=[ItemState(s) for s in states],
            unprocessed_only=unprocessed,
            limit=limit,
        )
    records = [_listing_record(listing) for listing in listings]
    if as_json:
        echo_json(records)
        return
    echo_table(
        ["id", "agent", "key", "state", "status", "rev", "reply", "question"],
        [
            [
                str(r["id"]),
                r["agent"],
                r["key"],
                r["state"],
                r["status"],
                str(r["revision"]),
                f"{r['reply']['channel']}/{r['reply']['kind']}" if r["reply"] else "",
                _short(r["question"]),
            ]
            for r in records
        ],
    )


@inbox.command("show")
@database_url_option
@click.argument("item_id", metavar="ITEM", type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True)
@reports_errors
def show_item(database_url: str | None, item_id: int, as_json: bool) -> None:
    """One item in full: the question, its context, the reply and what the agent did."""
    from achilles.cli.common import open_database
    from achilles.inbox import service

    with open_database(database_url).transaction() as session:
        listing = service.get_listing(session, item_id)
        _, board_version = service.get_item(session, item_id)
        wake = service.wake_settings(session, listing.item.agent_id).wake_on_reply
    record = {**_listing_record(listing), "board_version": board_version, "wake_on_reply": wake}
    if as_json:
        echo_json(record)
        return
    for key in ("id", "agent", "owner", "key", "state", "status", "revision", "board_version"):
        click.echo(f"{key + ':':15}{record[key]}")
    click.echo(f"{'wake on reply:':15}{'yes' if wake else 'no'}")
    click.echo(f"{'created:':15}{record['created_at']}")
    click.echo(f"{'updated:':15}{record['updated_at']}")
    click.echo(f"question:\n  {record['question']}")
    if record["context"]:
        click.echo(f"context:\n  {record['context']}")
    reply = record["reply"]
    if reply is None:
        click.echo("reply: none yet")
        return
    click.echo(
        f"reply #{reply['serial']} ({reply['kind']}, via {reply['channel']},"
        f" {reply['handled_at']}):\n  {reply['text']}"
    )
    click.echo(f"{'taken:':15}{reply['seen_at'] or 'not yet'}")
    click.echo(f"{'outcome:':15}{reply['outcome'] or 'not processed yet'}")


@inbox.command("reply")
@database_url_option
@click.argument("item_id", metavar="ITEM", type=click.IntRange(min=1))
@click.option("--text", "text", required=True, help="The reply ('-' reads it from stdin).")
@click.option("--clarify", is_flag=True, help="Ask the agent to clarify instead of answering.")
@click.option(
    "--channel",
    type=click.Choice([c.value for c in ReplyChannel]),
    default=ReplyChannel.INBOX.value,
    show_default=True,
    help="inbox replies always replace; chat replies never replace an untaken reply.",
)
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="KUBECONFIG",
    help="Cluster for the wake request  [env: KUBECONFIG; default ~/.kube/config]",
)
@click.option("--json", "as_json", is_flag=True)
@reports_errors
def reply(
    database_url: str | None,
    item_id: int,
    text: str,
    clarify: bool,
    channel: str,
    kubeconfig: Path | None,
    as_json: bool,
) -> None:
    """Reply to an item as a person. Exit 3 (not an error): a chat reply was refused."""
    from achilles.cli.common import open_database
    from achilles.inbox import service

    body = sys.stdin.read() if text == "-" else text
    kind = ReplyKind.CLARIFY if clarify else ReplyKind.ANSWER
    with open_database(database_url).transaction() as session:
        receipt = service.reply(session, item_id, body, kind=kind, channel=ReplyChannel(channel))
    # Committed: whatever happens to the wake request, the reply stands.
    wake = _deliver_wake(receipt, kubeconfig)
    _report_reply(receipt, wake, as_json)
    if not receipt.accepted:
        sys.exit(EXIT_CHAT_REFUSED)


def _deliver_wake(receipt: ReplyReceipt, kubeconfig: Path | None) -> dict[str, Any]:
    """Ask for a run when the owner allows replies to wake the agent."""
    wake: dict[str, Any] = {"requested": receipt.wake_requested, "delivered": False}
    if not receipt.wake_requested:
        return wake
    resource = receipt.agent_resource
    if resource is None:
        wake["detail"] = (
            "the agent has no Agent resource on record; start a run with `achilles runs enqueue`"
        )
        return wake
    from achilles.errors import ClusterUnavailable, NotFound
    from achilles.k8s.run_request import RUN_REQUESTED_AT, request_run

    assert receipt.item.reply is not None
    wake["agent_resource"] = f"{resource.namespace}/{resource.name}"
    try:
        value = request_run(
            resource.namespace, resource.name, receipt.item.reply.handled_at, kubeconfig=kubeconfig
        )
    except (ClusterUnavailable, NotFound) as exc:
        wake["detail"] = f"run not requested: {exc}"
        return wake
    wake.update(delivered=True, annotation={RUN_REQUESTED_AT: value})
    return wake


def _report_reply(receipt: ReplyReceipt, wake: dict[str, Any], as_json: bool) -> None:
    from achilles.inbox.presentation import item_record

    if as_json:
        echo_json(
            {
                "accepted": receipt.accepted,
                "item": item_record(receipt.item, board_version=receipt.board_version),
                "board_version": receipt.board_version,
                "wake": wake,
            }
        )
        return
    item, current = receipt.item, receipt.item.reply
    assert current is not None  # a refusal only happens over an existing reply
    if not receipt.accepted:
        click.echo(
            f"chat reply not written: item {item.id} holds reply #{current.serial}"
            f" (via {current.channel.value}) that the agent has not taken yet"
        )
        return
    click.echo(
        f"reply #{current.serial} written to item {item.id} ({current.kind.value},"
        f" via {current.channel.value}); revision {item.revision},"
        f" board version {receipt.board_version}"
    )
    if wake["delivered"]:
        click.echo(f"run requested: Agent {wake['agent_resource']} annotated")
    elif wake["requested"]:
        click.echo(f"warning: wake-on-reply is on but {wake['detail']}", err=True)


@inbox.command("wake-on-reply")
@database_url_option
@click.argument("agent_ref", metavar="AGENT")
@click.option("--on/--off", "enabled", default=None, help="Turn it on or off (else: show it).")
@reports_errors
def wake_on_reply(database_url: str | None, agent_ref: str, enabled: bool | None) -> None:
    """Show or set whether a reply to a blocked item asks for a run of AGENT (owner's choice)."""
    from achilles.cli.common import open_database
    from achilles.db.journal.agents import find_agent_id
    from achilles.inbox import service

    with open_database(database_url).transaction() as session:
        agent_id = find_agent_id(session, agent_ref)
        if enabled is None:
            settings = service.wake_settings(session, agent_id)
        else:
            settings = service.set_wake_on_reply(session, agent_id, enabled)
    click.echo(f"agent {agent_id}: wake on reply {'on' if settings.wake_on_reply else 'off'}")
