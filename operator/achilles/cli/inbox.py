"""`achilles inbox`: the human side of the Agent Inbox (seed 003, DESIGN.md §5).

Exit codes of `reply`: 0 the reply was written; 3 a chat reply was refused by
the chat rule (the agent has not taken the current reply yet: nothing was
written, and that is not an error); 1 the request failed (no such item,
database unreachable); 2 malformed input. A wake request that cannot reach the
cluster is reported but does not change the exit code: the reply is committed.

Each command parses, calls one function of `achilles.services.inbox`, and prints.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from achilles.cli.approvals import approve, reject, show_approval
from achilles.cli.common import (
    UserKey,
    WholeNumber,
    database_url_option,
    echo_json,
    echo_table,
    kubeconfig_option,
    reports_errors,
)
from achilles.cli.inbox_agent import agent
from achilles.domain.inbox import ItemState, ReplyChannel, ReplyKind

if TYPE_CHECKING:
    from achilles.db.inbox.board import ItemListing
    from achilles.services.inbox import ReplyReceipt, WakeOutcome

# `reply`: a chat reply refused by the chat rule (nothing written; not an error).
EXIT_CHAT_REFUSED = 3
_QUESTION_WIDTH = 60


@click.group()
def inbox() -> None:
    """The Agent Inbox: questions agents asked people, and people's replies."""


inbox.add_command(agent)
# Approvals of agents' tool calls (issue 38).
inbox.add_command(show_approval)
inbox.add_command(approve)
inbox.add_command(reject)


def _listing_record(listing: ItemListing) -> dict[str, Any]:
    from achilles.domain.inbox_records import item_record

    return {**item_record(listing.item), "agent": listing.agent_name, "owner": listing.owner_key}


def _short(text: str, width: int = _QUESTION_WIDTH) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


@inbox.command("list")
@database_url_option
@click.option(
    "--owner", type=UserKey(), metavar="USER", help="Only agents of this owner (user key)."
)
@click.option("--agent", "agent_ref", metavar="ID|NAME", help="Only this agent's items.")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice([s.value for s in ItemState]),
    help="Only items in this state (repeatable).",
)
@click.option(
    "--unprocessed",
    is_flag=True,
    help="Only items with an unprocessed reply (answered, not yet acknowledged by the agent).",
)
@click.option("--limit", default=200, show_default=True, type=WholeNumber(1, 10_000))
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
    from achilles.services import inbox as service

    listings = service.list_items(
        open_database(database_url),
        owner_key=owner,
        agent_ref=agent_ref,
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
@click.argument("item_id", metavar="ITEM", type=WholeNumber(min=1))
@click.option("--json", "as_json", is_flag=True)
@reports_errors
def show_item(database_url: str | None, item_id: int, as_json: bool) -> None:
    """One item in full: the question, its context, the reply and what the agent did."""
    from achilles.cli.common import open_database
    from achilles.services import inbox as service

    details = service.item_details(open_database(database_url), item_id)
    wake = details.wake_on_reply
    record = {
        **_listing_record(details.listing),
        "board_version": details.board_version,
        "wake_on_reply": wake,
    }
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
@click.argument("item_id", metavar="ITEM", type=WholeNumber(min=1))
@click.option("--text", "text", required=True, help="The reply ('-' reads it from stdin).")
@click.option("--clarify", is_flag=True, help="Ask the agent to clarify instead of answering.")
@click.option(
    "--channel",
    type=click.Choice([c.value for c in ReplyChannel]),
    default=ReplyChannel.INBOX.value,
    show_default=True,
    help="inbox replies always replace; chat replies never replace an untaken reply.",
)
@kubeconfig_option("Cluster for the wake request")
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
    from achilles.services import inbox as service
    from achilles.services.run_requests import KubernetesRunRequester

    body = sys.stdin.read() if text == "-" else text
    receipt = service.reply(
        open_database(database_url),
        item_id,
        body,
        kind=ReplyKind.CLARIFY if clarify else ReplyKind.ANSWER,
        channel=ReplyChannel(channel),
        requester=KubernetesRunRequester(kubeconfig),
    )
    _report_reply(receipt, as_json)
    if not receipt.accepted:
        sys.exit(EXIT_CHAT_REFUSED)


def _wake_record(wake: WakeOutcome) -> dict[str, Any]:
    record: dict[str, Any] = {"requested": wake.requested, "delivered": wake.delivered}
    if wake.agent_resource is not None:
        record["agent_resource"] = wake.agent_resource
    if wake.request is not None:
        from achilles.k8s.run_request import RUN_REQUESTED_AT

        record["annotation"] = {RUN_REQUESTED_AT: wake.request}
    if wake.detail is not None:
        record["detail"] = wake.detail
    return record


def _report_reply(receipt: ReplyReceipt, as_json: bool) -> None:
    from achilles.domain.inbox_records import item_record

    wake = receipt.wake
    if as_json:
        echo_json(
            {
                "accepted": receipt.accepted,
                "item": item_record(receipt.item, board_version=receipt.board_version),
                "board_version": receipt.board_version,
                "wake": _wake_record(wake),
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
    if wake.delivered:
        click.echo(f"run requested: Agent {wake.agent_resource} annotated")
    elif wake.requested:
        click.echo(f"warning: wake-on-reply is on but {wake.detail}", err=True)


@inbox.command("wake-on-reply")
@database_url_option
@click.argument("agent_ref", metavar="AGENT")
@click.option("--on/--off", "enabled", default=None, help="Turn it on or off (else: show it).")
@kubeconfig_option("Cluster of the agent's Agent resource (its spec.wakeOnReply)")
@reports_errors
def wake_on_reply(
    database_url: str | None, agent_ref: str, enabled: bool | None, kubeconfig: Path | None
) -> None:
    """Show or set whether a reply to a blocked item asks for a run of AGENT (owner's choice).

    For an agent with an Agent resource, setting it also writes the resource's
    spec.wakeOnReply, which the operator mirrors into the agent's row at every event
    (the spec wins over an earlier setting here)."""
    from achilles.cli.common import open_database
    from achilles.services import inbox as service
    from achilles.services.run_requests import KubernetesAgentSpecWriter

    setting = service.wake_on_reply(
        open_database(database_url),
        agent_ref,
        enabled,
        spec_writer=KubernetesAgentSpecWriter(kubeconfig),
    )
    click.echo(
        f"agent {setting.agent_id}: wake on reply {'on' if setting.wake_on_reply else 'off'}"
    )
    if setting.resource_written:
        click.echo(f"Agent {setting.agent_resource}: spec.wakeOnReply written")
    elif setting.detail is not None:
        click.echo(
            f"warning: Agent {setting.agent_resource}: {setting.detail}; if the resource sets"
            " spec.wakeOnReply, the operator restores its value at the agent's next event",
            err=True,
        )
