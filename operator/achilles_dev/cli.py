"""`achilles dev`: the local stack on one machine (see docs/development.md).

`build` compiles the control plane and the real node once and builds the images; `up`
starts PostgreSQL, etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a
real node (containerd, kubelet, kube-proxy; root), the demo model server and the dev
OpenID Provider, and waits until they are ready; `env` prints the
exports that point tools at them; `token` prints a bearer token for a user key; `down`
stops all of it and removes what the node left.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from achilles.cli.common import CommandFailed, echo_table, reports_errors

state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="ACHILLES_DEV_STATE",
    default=None,
    help="Where the stack keeps certificates, data, logs and pid files  "
    "[default: ~/.local/state/achilles/dev; env: ACHILLES_DEV_STATE]",
)


def _stack(state_dir: Path | None) -> Any:
    from achilles_dev.config import StackConfig, default_state_dir
    from achilles_dev.stack import LocalStack

    return LocalStack(StackConfig.load(state_dir or default_state_dir()))


@click.group()
def dev() -> None:
    """Run the whole platform locally: real control plane, no Docker."""


@dev.command()
@click.option("--force", is_flag=True, help="Rebuild even when the binaries are current.")
@click.option(
    "--no-images",
    is_flag=True,
    help="Only the control plane's binaries (the benchmarks' stacks without a node).",
)
@click.option(
    "--only",
    "only",
    multiple=True,
    metavar="BINARY",
    help="Build just this binary, no images (repeatable), e.g. `--only helm` for `make lint`.",
)
@reports_errors
def build(force: bool, no_images: bool, only: tuple[str, ...]) -> None:
    """Build the binaries (once) and the base, pause, engine and runner images (cached layers)."""
    from achilles_dev.build import ensure_built

    if only:
        ensure_built(force=force, only=set(only))
        return
    import os

    if not no_images and os.geteuid() != 0:
        click.echo("images and the real node skipped: they need root")
        no_images = True
    ensure_built(force=force, node=not no_images)
    if not no_images:
        from achilles_dev.images import ensure_images

        ensure_images()


@dev.command("kind-image")
@reports_errors
def kind_image() -> None:
    """Build (once, cached) kind, kubeadm, CoreDNS and the kind node image, without a registry.

    For `ACHILLES_TEST_CLUSTER=kind make test-cluster` (docs/development.md, "kind").
    """
    from achilles_dev.kind_image import ensure_node_image

    click.echo(ensure_node_image())


@dev.command()
@state_dir_option
@reports_errors
def up(state_dir: Path | None) -> None:
    """Start the local stack (a real node: needs root), install the chart (the operator
    and the API as its Deployments) and the demo (owner, model, agent)."""
    from achilles_dev.chart import install_into_stack  # the chart: CRDs, RBAC, policies

    stack = _stack(state_dir)
    stack.up()
    # Converge, not just start: the chart and the demo are applied on every `up`, so a
    # failed or missing release, or a deleted object of it, is put back.
    install_into_stack(stack)
    if stack.config.real_node and stack.with_postgres:
        from achilles_dev.demo import install_demo

        install_demo(stack)
    click.echo('point your shell at it:  eval "$(achilles dev env)"')


@dev.command()
@state_dir_option
@click.option(
    "--timeout", type=click.FloatRange(min=1), default=300, show_default=True, help="Seconds."
)
@reports_errors
def demo(state_dir: Path | None, timeout: float) -> None:
    """Run the demo agent once, through the operator and a real Job, and follow it."""
    from achilles_dev.demo import run_demo

    stack = _stack(state_dir)
    if not (stack.config.real_node and stack.with_postgres):
        raise click.UsageError("the demo needs a stack with a real node and PostgreSQL")
    raise SystemExit(run_demo(stack, timeout))


@dev.command()
@state_dir_option
@reports_errors
def down(state_dir: Path | None) -> None:
    """Stop everything `up` started, and remove what its node left (pods included)."""
    _stack(state_dir).down()


@dev.command()
@state_dir_option
@reports_errors
def env(state_dir: Path | None) -> None:
    """Print `export` lines for KUBECONFIG, ACHILLES_DATABASE_URL, ACHILLES_OIDC_ISSUER
    and PATH."""
    for line in _stack(state_dir).env_lines():
        click.echo(line)


@dev.command()
@state_dir_option
@click.argument("user")
@reports_errors
def token(state_dir: Path | None, user: str) -> None:
    """Print a bearer token for USER (any user key) from the stack's OIDC provider.

    A real access token (an RS256 JWT, `sub` = USER) signed in through the provider's
    authorization-code flow with the dev password, for curl and scripts:
    `curl -H "Authorization: Bearer $(achilles dev token alice)" ...`. Exits 2 for a
    malformed user key, 1 when the stack's provider is not running.
    """
    from achilles.domain.users import check_user_key
    from achilles.errors import LocalStackError
    from achilles_dev import oidc
    from achilles_dev.processes import running_from_pidfile
    from achilles_dev.stack_components import OIDC_PROVIDER

    check_user_key(user)
    stack = _stack(state_dir)
    hint = f"(state {stack.config.state_dir}): run `achilles dev up`"
    if OIDC_PROVIDER not in stack.component_names:
        raise LocalStackError(f"this stack runs no OIDC provider {hint} on a stack with PostgreSQL")
    if running_from_pidfile(stack.config.pidfile(OIDC_PROVIDER)) is None:
        raise LocalStackError(f"the stack's OIDC provider is not running {hint}")
    issuer = stack.config.oidc_issuer
    if not oidc.is_serving(issuer):
        raise LocalStackError(f"the stack's OIDC provider does not answer at {issuer} {hint}")
    click.echo(oidc.token_for(issuer, user))


@dev.command()
@state_dir_option
@reports_errors
def status(state_dir: Path | None) -> None:
    """Show whether each part runs: processes, the chart's release, the operator.

    Exits 1 when any part is not healthy (stopped, failed, missing), 0 otherwise.
    """
    from achilles_dev.health import stack_checks

    stack = _stack(state_dir)
    checks = stack_checks(stack)
    echo_table(["part", "state", "detail"], [[c.name, c.state, c.detail] for c in checks])
    click.echo(f"state: {stack.config.state_dir}")
    if stack.config.real_node and stack.config.network_index:
        net = stack.config.network
        click.echo(
            f"node: {stack.config.node_name}, {net.node_ip} in network namespace {net.netns}, "
            f"pods on {net.pod_cidr}; API server on {stack.config.apiserver_url}"
        )
    unhealthy = [c.name for c in checks if not c.healthy]
    if unhealthy:
        raise CommandFailed(f"not healthy: {', '.join(unhealthy)}")
