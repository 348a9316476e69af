"""The `achilles` console script: one entry point, one sub-group per concern.

Each sub-group lives in its own module of this package and is registered in
`_SUBCOMMANDS`. Sub-modules import heavy libraries (kubernetes, openai) inside
their commands so that `achilles --help` stays fast.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

import click

# "command name" -> "module:attribute" of a click command or group.
_SUBCOMMANDS: dict[str, str] = {
    "budget": "achilles.cli.budget:budget",
    "crds": "achilles.cli.crds:crds",
    "db": "achilles.cli.db:db",
    "inbox": "achilles.cli.inbox:inbox",
    "ks": "achilles.cli.ks:ks",
    "model-server": "achilles.cli.model_server:model_server",
    "operator": "achilles.cli.operator:operator",
    "run-now": "achilles.cli.run_now:run_now",
    "runner": "achilles.cli.runner:runner",
    "runs": "achilles.cli.runs:runs",
    "users": "achilles.cli.users:users",
    "schedule": "achilles.cli.schedule:schedule",
}


# Checkout-only groups: the local development stack and the benchmarks are not part of
# the product (not in the wheel, so not in the images). `achilles dev` and `achilles
# bench` exist only where their package is importable, i.e. in a checkout. Looked up by
# name, so no product module imports them.
_CHECKOUT_ONLY: dict[str, tuple[str, str]] = {
    "dev": ("achilles_dev", "achilles_dev.cli:dev"),
    "bench": ("bench", "bench.cli:bench"),
}


def _subcommands() -> dict[str, str]:
    extra = {
        name: target
        for name, (package, target) in _CHECKOUT_ONLY.items()
        if importlib.util.find_spec(package) is not None
    }
    return {**_SUBCOMMANDS, **extra}


class _LazyGroup(click.Group):
    """Imports a sub-command's module only when that sub-command is used.

    Errors are printed as one `error: ...` line, for every sub-command alike: exit
    code 2 for malformed input (click's usage errors), the exception's own code
    otherwise (see `achilles.cli.common`).
    """

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            result = super().main(*args, **kwargs)
        except click.UsageError as exc:
            click.echo(f"error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("aborted", err=True)
            sys.exit(1)
        sys.exit(result if isinstance(result, int) else 0)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_subcommands())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _subcommands().get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        command = getattr(importlib.import_module(module_name), attribute)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="achilles-agent-engine")
def cli() -> None:
    """Achilles Agent Engine: personal AI agents run as Kubernetes Jobs."""
