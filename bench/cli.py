"""`achilles bench`: the benchmark suite (docs/performance.md). Only in a checkout: the
product's CLI finds this group by name, like `achilles dev`, and the wheel has neither.

Each benchmark prints its progress on stderr, its table on stdout, and writes
`bench/results/<name>.json` (or `--json FILE`) with a markdown table beside it.
Benchmarks are never part of the test command; tests/ runs each at a tiny size.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from bench import cli_cluster
from bench.cli_options import json_option, server_option, show, sigterm_as_exit, size_option
from bench.report import RESULTS_DIR, Report, summary_markdown


@click.group()
def bench() -> None:
    """Benchmarks on a real PostgreSQL and a real control plane (not run by the tests)."""
    sigterm_as_exit()


@bench.command()
@size_option(10_000_000, "agent_runs history rows (owners = size/1000, agents = size/100)")
@json_option
@server_option
@click.option(
    "--as-owner",
    is_flag=True,
    help="Measure as the tables' owner (no grants, no row-level security), not the"
    " operator's login: the comparison for least privilege's cost.",
)
def journal(size: int, json_path: Path | None, server_url: str | None, as_owner: bool) -> None:
    """Enqueue through the gates vs raw INSERT, budget query, reaper, scheduler scans."""
    from bench import journal as benchmark

    show(benchmark.run(size, json_path, server_url, as_owner=as_owner))


@bench.command(name="run-steps")
@size_option(40, "runs, each of 25 rounds of tokens writes (as before, none, 2 steps)")
@json_option
@server_option
def run_steps(size: int, json_path: Path | None, server_url: str | None) -> None:
    """A run's steps in the journal: cost per step, writes of a 50-step run."""
    from bench import run_steps as benchmark

    show(benchmark.run(size, json_path, server_url))


@bench.command()
@size_option(200, "MCP calls each way (and up to 30 approvals)")
@json_option
@server_option
def tools(size: int, json_path: Path | None, server_url: str | None) -> None:
    """MCP tools (issue 38): the runner's overhead per call against the server's own
    latency, and reply -> approved call made."""
    from bench import tools as benchmark

    show(benchmark.run(size, json_path, server_url))


@bench.command()
@size_option(10_000, "agents (one owner per ten, 1 % with the owner's switch off)")
@click.option(
    "--week-runs",
    type=click.IntRange(min=0),
    default=None,
    help="Runs finished this week  [default: 10 per agent]",
)
@click.option(
    "--seconds",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    help="How long the monitor samples.",
)
@json_option
@server_option
def invariants(
    size: int, week_runs: int | None, seconds: float, json_path: Path | None, server_url: str | None
) -> None:
    """Database only: what the seed's invariant monitor costs beside a benchmark."""
    from bench import invariants as benchmark

    show(benchmark.run(size, json_path, server_url, week_runs=week_runs, seconds=seconds))


@bench.command()
@size_option(100_000, "finished runs over two years (100 owners, 1,000 agents)")
@click.option(
    "--output-bytes",
    type=click.IntRange(0, 1_000_000),
    default=2000,
    show_default=True,
    help="Size of each run's output (word-like text).",
)
@click.option(
    "--steps",
    type=click.IntRange(0, 200),
    default=10,
    show_default=True,
    help="Steps recorded per run.",
)
@json_option
@server_option
def retention(
    size: int, output_bytes: int, steps: int, json_path: Path | None, server_url: str | None
) -> None:
    """Journal bytes per run, a year at 100k agents, and the retention pass's deletes."""
    from bench import retention as benchmark

    show(benchmark.run(size, json_path, server_url, output_bytes=output_bytes, steps=steps))


@bench.command()
@size_option(
    10_000_000, "agent_runs rows (owners = size/1000, agents = size/100, inbox items = size/10)"
)
@json_option
@server_option
def api(size: int, json_path: Path | None, server_url: str | None) -> None:
    """One `achilles api` process: GET /v1/inbox and /v1/runs, reply -> SSE, token checks."""
    from bench import api as benchmark

    show(benchmark.run(size, json_path, server_url))


# The benchmarks on a real control plane (bench/cli_cluster.py).
for _command in (
    cli_cluster.burst_vs_cronjob,
    cli_cluster.steady_state,
    cli_cluster.intake,
    cli_cluster.slot_to_heartbeat,
    cli_cluster.kept_jobs,
):
    bench.add_command(_command)


def _benchmarks() -> dict[str, Callable[[], Report]]:
    """Every benchmark at its default size, in the order `all` runs them."""
    from bench import burst, heartbeat, steady
    from bench import journal as journal_bench
    from bench import run_steps as run_steps_bench

    return {
        "journal": lambda: journal_bench.run(journal_bench.DEFAULT_SIZE, None),
        "run-steps": lambda: run_steps_bench.run(run_steps_bench.DEFAULT_SIZE, None),
        "burst-vs-cronjob": lambda: burst.run(burst.DEFAULT_SIZE, None),
        "steady-state": lambda: steady.run(steady.DEFAULT_SIZE, None),
        "slot-to-heartbeat": lambda: heartbeat.run(heartbeat.DEFAULT_SIZE, None),
    }


@bench.command(name="all")
@click.option(
    "--only", multiple=True, help="Run only this benchmark (repeatable)  [default: every one]"
)
def all_benchmarks(only: tuple[str, ...]) -> None:
    """Every benchmark at its default size, then bench/results/README.md (the summary)."""
    benchmarks = _benchmarks()
    names = list(only) or list(benchmarks)
    unknown = sorted(set(names) - set(benchmarks))
    if unknown:
        raise click.UsageError(f"unknown benchmark(s): {', '.join(unknown)}")
    failed = []
    for name in names:
        try:
            if show(benchmarks[name](), exit_on_failure=False):
                failed.append(name)
        except Exception as exc:  # one failing benchmark must not hide the others
            failed.append(name)
            click.echo(f"error: benchmark {name} failed: {exc}", err=True)
    click.echo(f"summary: {_write_summary(list(benchmarks))}")
    if failed:
        sys.exit(1)


def _write_summary(names: list[str]) -> Path:
    summary = RESULTS_DIR / "README.md"
    summary.write_text(summary_markdown(RESULTS_DIR / f"{name}.json" for name in names))
    return summary


@bench.command()
def summary() -> None:
    """Rewrite bench/results/README.md from the results there (after single runs)."""
    names = ["journal", "burst-vs-cronjob", "steady-state", "slot-to-heartbeat"]
    extra = sorted(p.stem for p in RESULTS_DIR.glob("*.json") if p.stem not in names)
    click.echo(f"summary: {_write_summary(names + extra)}")
