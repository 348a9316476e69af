"""`achilles chaos`: the fault suite (docs/reliability.md). Only in a checkout: the product's
CLI finds this command by name, like `achilles dev` and `achilles bench`.

Progress goes to stderr, the table (one row per scenario: what was injected, the figure
measured, pass/fail; each failure under it, the invariant monitor's violations among
them) and the monitor's line to stdout, and with `--json FILE` every figure and detail
to FILE.
Exit code 0 when every scenario passed, 1 otherwise.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import FrameType

import click


def _sigterm_as_exit() -> None:
    """SIGTERM unwinds like Ctrl-C, so every clean-up runs."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def _progress(line: str) -> None:
    click.echo(line, err=True)


@click.command()
@click.argument("scenarios", nargs=-1, metavar="SCENARIO...|all")
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write every figure and detail here.",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The suite's own stack  [default: ~/.local/state/achilles/chaos]",
)
@click.option(
    "--keep", is_flag=True, help="Leave the stack running afterwards (the next run reuses it)."
)
@click.option("--quick", is_flag=True, help="Smaller counts (the test command's sizes).")
@click.option("--list", "list_only", is_flag=True, help="List the scenarios and exit.")
def chaos(
    scenarios: tuple[str, ...],
    json_path: Path | None,
    state_dir: Path | None,
    keep: bool,
    quick: bool,
    list_only: bool,
) -> None:
    """Inject faults into the local stack (real node, operator, PostgreSQL) and check the
    journal, the Jobs and the Agents against the invariants, the seed's watched throughout
    by the invariant monitor. Needs root (the real node)."""
    from achilles_chaos.suite import BY_NAME, SCENARIOS

    if list_only:
        for scenario in SCENARIOS:
            click.echo(f"{scenario.name:18} {scenario.summary}")
        return
    known = [scenario.name for scenario in SCENARIOS]
    if not scenarios:
        raise click.UsageError("name a scenario or `all` (--list shows them)")
    names = known if scenarios == ("all",) else list(scenarios)
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise click.UsageError(f"unknown scenario(s): {', '.join(unknown)} (--list shows them)")
    _sigterm_as_exit()
    from achilles_chaos.cluster import default_state_dir
    from achilles_chaos.report import invariants_line, table, write_json
    from achilles_chaos.suite import run_suite

    results, meta = run_suite(
        [BY_NAME[name] for name in names],
        state_dir=state_dir or default_state_dir(),
        keep=keep,
        quick=quick,
        report=_progress,
    )
    click.echo(table(results))
    click.echo(invariants_line(results))
    click.echo(f"stack up in {meta['stack_seconds']}s; whole run {meta['total_seconds']}s")
    repairs = meta["stack_repairs"]
    assert isinstance(repairs, list)
    for repair in repairs:
        click.echo(f"stack {repair} between scenarios")
    if json_path is not None:
        write_json(json_path, results, meta)
        click.echo(f"figures: {json_path}")
    if not all(result.passed for result in results):
        sys.exit(1)
