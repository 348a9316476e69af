"""`achilles bench`: the benchmark suite (docs/performance.md). Only in a checkout: the
product's CLI finds this group by name, like `achilles dev`, and the wheel has neither.

Each benchmark prints its progress on stderr, its table on stdout, and writes
`bench/results/<name>.json` (or `--json FILE`) with a markdown table beside it.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import click

from bench.report import RESULTS_DIR, Report, summary_markdown

json_option = click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the result here  [default: bench/results/<name>.json]",
)


def _size_option(default: int, what: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return click.option(
        "--size",
        type=click.IntRange(min=1),
        default=default,
        show_default=True,
        help=what,
    )


def _sigterm_as_exit() -> None:
    """SIGTERM unwinds like Ctrl-C, so every benchmark's clean-up runs."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def _show(report: Report) -> None:
    click.echo(report.markdown())


@click.group()
def bench() -> None:
    """Benchmarks on a real PostgreSQL and a real control plane (not run by the tests)."""
    _sigterm_as_exit()


@bench.command()
@_size_option(10_000_000, "agent_runs history rows (owners = size/1000, agents = size/100)")
@json_option
@click.option(
    "--server-url",
    default=None,
    help="An existing PostgreSQL server (superuser URL) to create the benchmark's "
    "database on  [default: a durable server of its own, removed afterwards]",
)
def journal(size: int, json_path: Path | None, server_url: str | None) -> None:
    """Enqueue through the gates vs raw INSERT, budget query, reaper, scheduler scans."""
    from bench import journal as benchmark

    _show(benchmark.run(size, json_path, server_url))


BENCHMARKS: dict[str, Callable[[int | None], Report]] = {}


def _register_all() -> None:
    from bench import journal as journal_bench

    BENCHMARKS["journal"] = lambda size: journal_bench.run(size or journal_bench.DEFAULT_SIZE, None)


@bench.command(name="all")
@click.option(
    "--only",
    multiple=True,
    help="Run only these benchmarks (repeatable)  [default: every one]",
)
def all_benchmarks(only: tuple[str, ...]) -> None:
    """Every benchmark at its default size; then bench/results/README.md, the summary."""
    _register_all()
    names = list(only) or list(BENCHMARKS)
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        raise click.UsageError(f"unknown benchmark(s): {', '.join(unknown)}")
    failed = []
    for name in names:
        try:
            _show(BENCHMARKS[name](None))
        except Exception as exc:  # one failing benchmark must not hide the others
            failed.append(name)
            click.echo(f"error: benchmark {name} failed: {exc}", err=True)
    summary = RESULTS_DIR / "README.md"
    summary.write_text(summary_markdown(RESULTS_DIR / f"{n}.json" for n in BENCHMARKS))
    click.echo(f"summary: {summary}")
    if failed:
        sys.exit(1)
