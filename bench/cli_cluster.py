"""`achilles bench`'s benchmarks on a real control plane (a local stack of their own:
API server, controllers, operator): burst-vs-cronjob and intake with no node (pods are
created, never run: no root needed); steady-state, slot-to-heartbeat and kept-jobs with
the real node, whose runs run in containers of the runner image (root). bench/cli.py
adds them to its group."""

from __future__ import annotations

from pathlib import Path

import click

from bench.cli_options import json_option, server_option, show, size_option


@click.command(name="burst-vs-cronjob")
@size_option(1000, "Agents due at one slot, and as many CronJobs due at one minute")
@json_option
@server_option
def burst_vs_cronjob(size: int, json_path: Path | None, server_url: str | None) -> None:
    """N agents due at one slot vs N CronJobs due at one minute, same control plane."""
    from bench import burst

    show(burst.run(size, json_path, server_url))


@click.command(name="steady-state")
@size_option(10_000, "Agent CRs (RSS and CPU are also reported at 1k and 5k)")
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
def steady_state(
    size: int,
    rate: float,
    duration: float,
    operator_env: tuple[str, ...],
    json_path: Path | None,
) -> None:
    """The operator at N Agents: slot -> Job under steady load, RSS, CPU, API requests;
    the runs on a real node (root; its pods reach a database server of the benchmark's
    own)."""
    from bench import steady

    env = _env_pairs(operator_env)
    show(steady.run(size, json_path, rate=rate, duration=duration, operator_env=env))


def _env_pairs(items: tuple[str, ...]) -> dict[str, str]:
    env = {}
    for item in items:
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--operator-env")
        env[name] = value
    return env


@click.command()
@size_option(10_000, "Agent CRs the operator is restarted under")
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

    show(
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


@click.command(name="slot-to-heartbeat")
@size_option(60, "Runs (one per agent, slots --spacing apart)")
@click.option(
    "--spacing",
    type=click.FloatRange(min=0.1),
    default=2.0,
    show_default=True,
    help="Seconds between two slots: 2 s overlaps runs on a small node (the node's load); "
    "a spacing longer than a run measures one run's path alone.",
)
@json_option
def slot_to_heartbeat(size: int, spacing: float, json_path: Path | None) -> None:
    """From a slot to the real runner's first heartbeat, with the model server, on a real
    node (root; its pods reach a database server of the benchmark's own)."""
    from bench import heartbeat

    show(heartbeat.run(size, json_path, spacing_s=spacing))


@click.command(name="kept-jobs")
@size_option(1000, "Finished run Jobs kept (each with its pod), made by really running them")
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
def kept_jobs(size: int, window: float, before: str | None, json_path: Path | None) -> None:
    """Database transactions per 5 min of an idle operator with N finished Jobs kept, run
    on a real node (root; its pods reach a database server of the benchmark's own)."""
    from bench import kept_jobs as benchmark

    show(benchmark.run(size, json_path, window_s=window, before=before))
