"""`achilles inbox approval|approve|reject`: the owner's decision on a tool call an agent
asked to make (issue 38; docs/tools.md).

Exit codes: 0 decided (or shown); 3 refused by the rules, nothing written (already
decided, or expired unanswered); 1 failed (no such item, an item that asks no approval,
database unreachable); 2 malformed input. A wake that cannot reach the cluster is
reported and does not change the exit code: the decision is committed, and the agent's
next run makes the approved call.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from achilles.cli.common import (
    WholeNumber,
    database_url_option,
    echo_json,
    kubeconfig_option,
    reports_errors,
)

if TYPE_CHECKING:
    from achilles.db.tools.approvals import Approval

EXIT_REFUSED = 3


def _record(approval: Approval) -> dict[str, Any]:
    return {
        "item": approval.item_id,
        "agent_id": approval.agent_id,
        "agent_tool": approval.tool_name,
        "tool": approval.mcp_tool,
        "arguments": approval.arguments,
        "reason": approval.reason,
        "state": approval.state.value,
        "expires_at": approval.expires_at,
        "decided_at": approval.decided_at,
        "decided_by": approval.decided_by,
        "executed_by_run": approval.executed_by_run_id,
        "executed_at": approval.executed_at,
        "result": approval.result,
        "error": approval.result_error,
    }


def _show(approval: Approval) -> None:
    from achilles.domain.mcp_tools import canonical_arguments

    record = _record(approval)
    click.echo(f"item {approval.item_id}: {approval.tool_name} / {approval.mcp_tool}")
    click.echo(f"  arguments: {canonical_arguments(approval.arguments)}")
    if approval.reason:
        click.echo(f"  reason:    {approval.reason}")
    click.echo(f"  state:     {record['state']} (expires {record['expires_at']})")
    if approval.result_error:
        click.echo(f"  error:     {approval.result_error}")


@click.command("approval")
@database_url_option
@click.argument("item_id", metavar="ITEM", type=WholeNumber(min=1))
@click.option("--json", "as_json", is_flag=True)
@reports_errors
def show_approval(database_url: str | None, item_id: int, as_json: bool) -> None:
    """The tool call an approval item asks: tool, exact arguments, reason, state."""
    from achilles.cli.common import open_database
    from achilles.services import tool_approvals

    found = tool_approvals.approval_of_item(open_database(database_url), item_id, owner_key=None)
    if as_json:
        echo_json(_record(found))
    else:
        _show(found)


def _decide(
    database_url: str | None,
    item_id: int,
    approve: bool,
    note: str | None,
    kubeconfig: Path | None,
    as_json: bool,
) -> None:
    from achilles.cli.common import open_database
    from achilles.services import tool_approvals
    from achilles.services.run_requests import KubernetesRunRequester

    decision = tool_approvals.Decision.APPROVE if approve else tool_approvals.Decision.REJECT
    receipt = tool_approvals.decide(
        open_database(database_url),
        item_id,
        decision,
        requester=KubernetesRunRequester(kubeconfig),
        note=note,
    )
    if as_json:
        echo_json(
            {
                "accepted": receipt.accepted,
                "refusal": None if receipt.refusal is None else receipt.refusal.value,
                "approval": _record(receipt.approval),
                "wake": {"requested": receipt.wake_requested, "detail": receipt.wake_detail},
            }
        )
    elif receipt.accepted:
        click.echo(f"item {item_id}: {receipt.approval.state.value}")
        if receipt.wake_requested:
            click.echo("run requested: the agent's next run makes the approved call" if approve
                       else "run requested: the agent hears the rejection")  # fmt: skip
        else:
            click.echo(f"warning: {receipt.wake_detail}", err=True)
    else:
        click.echo(
            f"not written: item {item_id} is {receipt.approval.state.value}"
            + (
                " (expired unanswered)"
                if receipt.refusal is tool_approvals.DecisionRefusal.EXPIRED
                else ""
            )
        )
    if not receipt.accepted:
        sys.exit(EXIT_REFUSED)


def _decision_command(name: str, approve: bool, help_text: str) -> click.Command:
    @click.command(name, help=help_text)
    @database_url_option
    @click.argument("item_id", metavar="ITEM", type=WholeNumber(min=1))
    @click.option("--note", default=None, help="A word for the agent (kept with the reply).")
    @kubeconfig_option("Cluster for the wake request")
    @click.option("--json", "as_json", is_flag=True)
    @reports_errors
    def command(
        database_url: str | None,
        item_id: int,
        note: str | None,
        kubeconfig: Path | None,
        as_json: bool,
    ) -> None:
        _decide(database_url, item_id, approve, note, kubeconfig, as_json)

    return command


approve = _decision_command(
    "approve",
    True,
    "Approve the call item ITEM asks: the agent's next run makes it once, with exactly "
    "the arguments shown. Exit 3: already decided or expired (nothing written).",
)
reject = _decision_command(
    "reject",
    False,
    "Reject the call item ITEM asks: it is never made, and the agent hears so. "
    "Exit 3: already decided or expired (nothing written).",
)
