"""`achilles bench`: the benchmark suite (docs/performance.md). Only in a checkout: the
product's CLI finds this group by name, like `achilles dev`, and the wheel has neither.

Each benchmark prints its progress on stderr, its table on stdout, and writes
`bench/results/<name>.json` (or `--json FILE`) with a markdown table beside it.
Benchmarks are never part of the test command; tests/ runs each at a tiny size.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import click

from achilles_dev.config import NODE_KINDS, NodeKind
from bench.report import RESULTS_DIR, Report, summary_markdown

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


def _size_option(default: int, what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(
        "--size", type=click.IntRange(min=1), default=default, show_default=True, help=what
    )


def _sigterm_as_exit() -> None:
    """SIGTERM unwinds like Ctrl-C, so every benchmark's clean-up runs."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def _show(report: Report, *, exit_on_failure: bool = True) -> list[str]:
    """The report's table; a benchmark during which the seed's invariants broke fails
    (exit 1), whatever its figures (issue 36 item 10)."""
    click.echo(report.markdown())
    failures = report.failures()
    for failure in failures:
        click.echo(f"error: {report.benchmark}: {failure}", err=True)
    if failures and exit_on_failure:
        sys.exit(1)
    return failures


@click.group()
def bench() -> None:
    """Benchmarks on a real PostgreSQL and a real control plane (not run by the tests)."""
    _sigterm_as_exit()


@bench.command()
@_size_option(10_000_000, "agent_runs history rows (owners = size/1000, agents = size/100)")
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

    _show(benchmark.run(size, json_path, server_url, as_owner=as_owner))


@bench.command(name="run-steps")
@_size_option(40, "runs, each of 25 rounds of tokens writes (as before, none, 2 steps)")
@json_option
@server_option
def run_steps(size: int, json_path: Path | None, server_url: str | None) -> None:
    """A run's steps in the journal: cost per step, writes of a 50-step run."""
    from bench import run_steps as benchmark

    _show(benchmark.run(size, json_path, server_url))


@bench.command()
@_size_option(200, "MCP calls each way (and up to 30 approvals)")
@json_option
@server_option
def tools(size: int, json_path: Path | None, server_url: str | None) -> None:
    """MCP tools (issue 38): the runner's overhead per call against the server's own
    latency, and reply -> approved call made."""
    from bench import tools as benchmark

    _show(benchmark.run(size, json_path, server_url))


@bench.command()
@_size_option(10_000, "agents (one owner per ten, 1 % with the owner's switch off)")
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

    _show(benchmark.run(size, json_path, server_url, week_runs=week_runs, seconds=seconds))


@bench.command()
@_size_option(100_000, "finished runs over two years (100 owners, 1,000 agents)")
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

    _show(benchmark.run(size, json_path, server_url, output_bytes=output_bytes, steps=steps))


@bench.command()
@_size_option(
    10_000_000, "agent_runs rows (owners = size/1000, agents = size/100, inbox items = size/10)"
)
@json_option
@server_option
def api(size: int, json_path: Path | None, server_url: str | None) -> None:
    """One `achilles api` process: GET /v1/inbox and /v1/runs, reply -> SSE, token checks."""
    from bench import api as benchmark

    _show(benchmark.run(size, json_path, server_url))


@bench.command(name="burst-vs-cronjob")
@_size_option(1000, "Agents due at one slot, and as many CronJobs due at one minute")
@json_option
@server_option
def burst_vs_cronjob(size: int, json_path: Path | None, server_url: str | None) -> None:
    """N agents due at one slot vs N CronJobs due at one minute, same control plane."""
    from bench import burst

    _show(burst.run(size, json_path, server_url))


@bench.command(name="steady-state")
@_size_option(10_000, "Agent CRs (RSS and CPU are also reported at 1k and 5k)")
@click.option(
    "--rate",
    type=click.FloatRange(min=0.01),
    default=2.0,
    show_default=True,
    help="Slots per second during the steady load.",
)
@click.option(
    "--duration",
    type=click.FloatRange(min=1),
    default=240.0,
    show_default=True,
    help="Seconds of steady load.",
)
@click.option(
    "--operator-env",
    multiple=True,
    metavar="NAME=VALUE",
    help="An environment variable for the operator process (repeatable), e.g. "
    "MALLOC_ARENA_MAX=2 to compare its memory.",
)
@json_option
@server_option
def steady_state(
    size: int,
    rate: float,
    duration: float,
    operator_env: tuple[str, ...],
    json_path: Path | None,
    server_url: str | None,
) -> None:
    """The operator at N Agents: slot -> Job under steady load, RSS, CPU, API requests."""
    from bench import steady

    env = _env_pairs(operator_env)
    _show(steady.run(size, json_path, server_url, rate=rate, duration=duration, operator_env=env))


def _env_pairs(items: tuple[str, ...]) -> dict[str, str]:
    env = {}
    for item in items:
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--operator-env")
        env[name] = value
    return env


@bench.command()
@_size_option(10_000, "Agent CRs the operator is restarted under")
@click.option(
    "--idle-window",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    help="Seconds of the operator's RSS and CPU sampled after each intake.",
)
@click.option(
    "--operator-env",
    multiple=True,
    metavar="NAME=VALUE",
    help="An environment variable for the operator process (repeatable).",
)
@click.option(
    "--memory-probe",
    is_flag=True,
    help="Sample the operator's memory from inside and measure what malloc_trim(0) gives "
    "back after each intake.",
)
@click.option(
    "--tracemalloc",
    is_flag=True,
    help="With --memory-probe: also trace the Python heap (slow; for the diagnosis only).",
)
@click.option(
    "--compare-env",
    multiple=True,
    metavar="NAME=VALUE",
    help="Restart a second time, nothing changed, with this variable added (repeatable), "
    "e.g. MALLOC_ARENA_MAX=2.",
)
@json_option
@server_option
def intake(
    size: int,
    idle_window: float,
    operator_env: tuple[str, ...],
    memory_probe: bool,
    tracemalloc: bool,
    compare_env: tuple[str, ...],
    json_path: Path | None,
    server_url: str | None,
) -> None:
    """The operator restarted under N Agents: restart -> all reconciled, RSS, idle CPU."""
    from bench import intake as benchmark

    _show(
        benchmark.run(
            size,
            json_path,
            server_url,
            idle_window_s=idle_window,
            operator_env=_env_pairs(operator_env),
            memory_probe=memory_probe,
            tracemalloc=tracemalloc,
            compare_env=_env_pairs(compare_env),
        )
    )


@bench.command(name="slot-to-heartbeat")
@_size_option(60, "Runs (one per agent, slots --spacing apart)")
@click.option(
    "--spacing",
    type=click.FloatRange(min=0.1),
    default=2.0,
    show_default=True,
    help="Seconds between two slots: 2 s overlaps runs on a small node (the node's load); "
    "a spacing longer than a run measures one run's path alone.",
)
@click.option(
    "--node",
    type=click.Choice(NODE_KINDS),
    default="containerd",
    show_default=True,
    help="The real node (containerd + runc, the runner image; needs root) or the kubelet "
    "stand-in (the runner as a host process: no container start-up).",
)
@json_option
@server_option
def slot_to_heartbeat(
    size: int, spacing: float, node: NodeKind, json_path: Path | None, server_url: str | None
) -> None:
    """From a slot to the real runner's first heartbeat, with the model server."""
    from bench import heartbeat

    if node == "containerd" and server_url is not None:
        raise click.UsageError(
            "--server-url needs --node process: the real node's pods reach a database "
            "server of the benchmark's own"
        )
    _show(heartbeat.run(size, json_path, server_url, node=node, spacing_s=spacing))


@bench.command(name="kept-jobs")
@_size_option(1000, "Finished run Jobs kept (each with its pod), made by really running them")
@click.option(
    "--window",
    type=click.FloatRange(min=10),
    default=300.0,
    show_default=True,
    help="Seconds over which the idle operator's transactions are counted.",
)
@click.option(
    "--before",
    metavar="REF",
    default=None,
    help="Also measure the operator of this commit (a git worktree), on the same Jobs.",
)
@json_option
@server_option
def kept_jobs(
    size: int, window: float, before: str | None, json_path: Path | None, server_url: str | None
) -> None:
    """Database transactions per 5 min of an idle operator with N finished Jobs kept."""
    from bench import kept_jobs as benchmark

    _show(benchmark.run(size, json_path, server_url, window_s=window, before=before))


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
            if _show(benchmarks[name](), exit_on_failure=False):
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
