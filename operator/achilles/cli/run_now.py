"""`achilles run-now [NAMESPACE/]AGENT`: ask for a run the way the portal does.

It writes a new `achilles.io/run-requested-at` value; with `--wait` it follows the
run the operator makes of it. Exit codes: 0 succeeded (or, without --wait, request
written); 1 failed or skipped; 3 refused by a closed lock; 2 bad input.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import click

from achilles.cli.common import CommandFailed, reports_errors

EXIT_REFUSED = 3
POLL_SECONDS = 0.5


def _split(ref: str, namespace: str | None) -> tuple[str, str]:
    if "/" in ref:
        ns, _, name = ref.partition("/")
        if not ns or not name or "/" in name:
            raise click.BadParameter(f"{ref!r} is not NAMESPACE/AGENT", param_hint="AGENT")
        return ns, name
    return namespace or "default", ref


@click.command("run-now")
@click.argument("agent")
@click.option("-n", "--namespace", default=None, help="Namespace of AGENT  [default: default]")
@click.option("--wait", is_flag=True, help="Follow the run to its end.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=900,
    show_default=True,
    help="Seconds to wait.",
)
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="KUBECONFIG",
    default=None,
    help="[env: KUBECONFIG; default ~/.kube/config or in-cluster]",
)
@reports_errors
def run_now(
    agent: str, namespace: str | None, wait: bool, timeout: float, kubeconfig: Path | None
) -> None:
    """Request a manual run of AGENT ([NAMESPACE/]NAME)."""
    from achilles.k8s.agent_status import read_agent_status
    from achilles.k8s.run_request import request_run

    ns, name = _split(agent, namespace)
    value = request_run(ns, name, datetime.now(UTC), kubeconfig=kubeconfig)
    click.echo(f"run requested for Agent {ns}/{name} ({value})")
    if not wait:
        return
    deadline = time.monotonic() + timeout
    shown = ""
    run_id: int | None = None
    while time.monotonic() < deadline:
        status = read_agent_status(ns, name, kubeconfig=kubeconfig)
        if status.get("lastHandledRunRequest") == value:
            accepted = next(
                (c for c in status.get("conditions", []) if c.get("type") == "RunRequestAccepted"),
                None,
            )
            if accepted and accepted.get("status") == "False":
                click.echo(f"refused: {accepted.get('message')}", err=True)
                raise SystemExit(EXIT_REFUSED)
            if accepted and run_id is None:
                words = str(accepted.get("message", "")).split()
                if words and words[-1].isdigit():
                    run_id = int(words[-1])
        last = status.get("lastRun") or {}
        if run_id is not None and last.get("id") == run_id:
            line = f"run {run_id}: {last.get('state')}" + (
                f" ({last['reason']})" if last.get("reason") else ""
            )
            if line != shown:
                click.echo(line)
                shown = line
            if last.get("state") == "succeeded":
                return
            if last.get("state") in ("failed", "skipped"):
                raise SystemExit(1)
        time.sleep(POLL_SECONDS)
    raise CommandFailed(f"timed out after {timeout:.0f} s waiting for the run of {ns}/{name}")
