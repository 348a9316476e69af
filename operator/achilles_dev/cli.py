"""`achilles dev`: the local stack on one machine (see docs/development.md).

`build` compiles the control plane once; `up` starts PostgreSQL, etcd, kube-apiserver,
kube-controller-manager and the kubelet stand-in and waits until they are ready;
`env` prints the exports that point tools at them; `down` stops all of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from achilles.cli.common import echo_table, reports_errors

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
@reports_errors
def build(force: bool) -> None:
    """Build etcd, kube-apiserver, kube-controller-manager, kubectl and helm (once)."""
    from achilles_dev.build import ensure_built

    ensure_built(force=force)


@dev.command()
@state_dir_option
@reports_errors
def up(state_dir: Path | None) -> None:
    """Start the local stack, wait until it is ready, install the chart (no operator)."""
    stack = _stack(state_dir)
    if stack.up():
        from achilles_dev.chart import install_into_stack  # the chart: CRDs, RBAC, policies

        install_into_stack(stack)
    click.echo('point your shell at it:  eval "$(achilles dev env)"')


@dev.command()
@state_dir_option
@reports_errors
def down(state_dir: Path | None) -> None:
    """Stop everything `up` started, pods' processes included."""
    _stack(state_dir).down()


@dev.command()
@state_dir_option
@reports_errors
def env(state_dir: Path | None) -> None:
    """Print `export` lines for KUBECONFIG, ACHILLES_DATABASE_URL and PATH."""
    for line in _stack(state_dir).env_lines():
        click.echo(line)


@dev.command()
@state_dir_option
@reports_errors
def status(state_dir: Path | None) -> None:
    """Show which components run."""
    from achilles_dev import postgres

    stack = _stack(state_dir)
    rows = [
        [c.name, "running" if c.process else "stopped", str(c.process.pid) if c.process else "-"]
        for c in stack.components()
    ]
    pg_running = postgres.is_running(stack.config.postgres_dir)
    rows.insert(0, ["postgres", "running" if pg_running else "stopped", "-"])
    echo_table(["component", "state", "pid"], rows)
    click.echo(f"state: {stack.config.state_dir}")


@dev.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("arguments", nargs=-1, type=click.UNPROCESSED)
def kubelet(arguments: tuple[str, ...]) -> None:
    """Run the kubelet stand-in in the foreground (`--help` for its options)."""
    from achilles_dev.kubelet.main import main

    main(list(arguments))
