"""What the `achilles bench` commands share (bench/cli.py, bench/cli_cluster.py): the
`--json`, `--server-url` and `--size` options, SIGTERM as an exit, and a report shown
(a benchmark during which the seed's invariants broke fails)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import click

from bench.report import Report

json_option = click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the result here (and a .md beside it)  [default: bench/results/<name>.json]",
)

server_option = click.option(
    "--server-url",
    default=None,
    help="An existing PostgreSQL server (superuser URL) to create the benchmark's "
    "database on  [default: a durable server of its own, removed afterwards]",
)


def size_option(default: int, what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(
        "--size", type=click.IntRange(min=1), default=default, show_default=True, help=what
    )


def sigterm_as_exit() -> None:
    """SIGTERM unwinds like Ctrl-C, so every benchmark's clean-up runs."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def show(report: Report, *, exit_on_failure: bool = True) -> list[str]:
    """The report's table; a benchmark during which the seed's invariants broke fails
    (exit 1), whatever its figures (issue 36 item 10)."""
    click.echo(report.markdown())
    failures = report.failures()
    for failure in failures:
        click.echo(f"error: {report.benchmark}: {failure}", err=True)
    if failures and exit_on_failure:
        sys.exit(1)
    return failures
