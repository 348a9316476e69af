"""`achilles run-now [NAMESPACE/]AGENT`: ask for a run the way the portal does.

It writes a new `achilles.io/run-requested-at` value; with `--wait` it follows the
run the operator makes of it. Exit codes: 0 succeeded (or, without --wait, request
written); 1 failed or skipped (or the Agent is missing); 3 refused by a closed lock;
4 cancelled (by its owner or an admin, while it waited or ran); 2 bad input.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import click

from achilles.cli.common import CommandFailed, kubeconfig_option, reports_errors
from achilles.domain.runs import FailReason

EXIT_REFUSED = 3
EXIT_CANCELLED = 4
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
@kubeconfig_option("Cluster of the Agent")
@reports_errors
def run_now(
    agent: str, namespace: str | None, wait: bool, timeout: float, kubeconfig: Path | None
) -> None:
    """Request a manual run of AGENT ([NAMESPACE/]NAME).

    With --wait, exit 0 succeeded, 1 failed or skipped, 3 refused by a closed lock,
    4 cancelled (achilles.io/cancel-run, achilles runs cancel)."""
    from achilles.k8s.agent_status import read_agent_status
    from achilles.services.run_requests import KubernetesRunRequester
    from achilles.services.runs import progress_of

    ns, name = _split(agent, namespace)
    request = KubernetesRunRequester(kubeconfig).request(ns, name, datetime.now(UTC))
    click.echo(f"run requested for Agent {ns}/{name} ({request})")
    if not wait:
        return
    deadline = time.monotonic() + timeout
    shown = ""
    while time.monotonic() < deadline:
        progress = progress_of(read_agent_status(ns, name, kubeconfig=kubeconfig), request)
        if progress is not None and progress.refused is not None:
            click.echo(f"refused: {progress.refused}", err=True)
            raise SystemExit(EXIT_REFUSED)
        if progress is not None and progress.state is not None:
            line = f"run {progress.run_id}: {progress.state}"
            line += f" ({progress.reason})" if progress.reason else ""
            if line != shown:
                click.echo(line)
                shown = line
            if progress.finished:
                if progress.reason == FailReason.CANCELLED:
                    click.echo(f"cancelled: run {progress.run_id} was cancelled", err=True)
                    raise SystemExit(EXIT_CANCELLED)
                raise SystemExit(0 if progress.state == "succeeded" else 1)
        time.sleep(POLL_SECONDS)  # polling the API server, not synchronising a test
    raise CommandFailed(f"timed out after {timeout:.0f} s waiting for the run of {ns}/{name}")
