"""The `achilles` console script: one entry point, one sub-group per concern.

Each sub-group lives in its own module of this package and is registered in
`_SUBCOMMANDS`. Sub-modules import heavy libraries (kubernetes, openai) inside
their commands so that `achilles --help` stays fast.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
import traceback
from typing import Any, NoReturn

import click
from click.core import ParameterSource

# Set to see the traceback of an internal error (a bug) instead of only its one line.
DEBUG_ENV = "ACHILLES_DEBUG"
# A full stop before the next capitalised sentence (not "e.g. this").
_SENTENCE_END = re.compile(r"\.(?= +[A-Z])")

# "command name" -> "module:attribute" of a click command or group.
_SUBCOMMANDS: dict[str, str] = {
    "api": "achilles.cli.api:api",
    "budget": "achilles.cli.budget:budget",
    "crds": "achilles.cli.crds:crds",
    "db": "achilles.cli.db:db",
    "inbox": "achilles.cli.inbox:inbox",
    "ks": "achilles.cli.ks:ks",
    "model-server": "achilles.cli.model_server:model_server",
    "notifications": "achilles.cli.notifications:notifications",
    "operator": "achilles.cli.operator:operator",
    "run-now": "achilles.cli.run_now:run_now",
    "runner": "achilles.cli.runner:runner",
    "runs": "achilles.cli.runs:runs",
    "users": "achilles.cli.users:users",
    "schedule": "achilles.cli.schedule:schedule",
}


# Checkout-only groups: the local development stack, the benchmarks and the fault suite
# are not part of the product (not in the wheel, so not in the images). `achilles dev`,
# `achilles bench` and `achilles chaos` exist only where their package is importable,
# i.e. in a checkout. Looked up by name, so no product module imports them.
_CHECKOUT_ONLY: dict[str, tuple[str, str]] = {
    "dev": ("achilles_dev", "achilles_dev.cli:dev"),
    "bench": ("bench", "bench.cli:bench"),
    "chaos": ("achilles_chaos", "achilles_chaos.cli:chaos"),
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
    code 2 for malformed input (click's usage errors, `InvalidInputError`, a setting
    missing or malformed: `ConfigurationError`), 1 for a
    request that could not be carried out (any other `AchillesError`, an `OSError`
    such as a busy port). Anything else is a bug: one line says so, and
    `ACHILLES_DEBUG=1` shows the traceback.
    """

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            result = super().main(*args, **kwargs)
        except click.UsageError as exc:
            _fail(usage_error_line(exc), exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            _fail("aborted", 1)
        except Exception as exc:
            _fail(*_error_line(exc))
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
        _speak_plainly(command)
        return command


def _speak_plainly(command: click.Command) -> None:
    """What every sub-command gets, whoever wrote it: bad numbers worded as ours
    (`achilles.cli.common.plain_number_types`), and help listings that show each
    command's first sentence whole (click cuts it to the terminal's width with "...")."""
    from achilles.cli.common import plain_number_types

    plain_number_types(command)
    if command.short_help is None and command.help:
        command.short_help = first_sentence(command.help)
    for sub in command.commands.values() if isinstance(command, click.Group) else ():
        _speak_plainly(sub)


def first_sentence(help_text: str) -> str:
    """The first sentence of a docstring's first paragraph, on one line."""
    paragraph = " ".join(inspect.cleandoc(help_text).split("\n\n")[0].split())
    end = _SENTENCE_END.search(paragraph)
    return paragraph if end is None else paragraph[: end.start() + 1]


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="achilles-agent-engine")
def cli() -> None:
    """Achilles Agent Engine: personal AI agents run as Kubernetes Jobs."""


def _fail(line: str, code: int) -> NoReturn:
    click.echo(f"error: {line}", err=True)
    sys.exit(code)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _error_line(exc: Exception) -> tuple[str, int]:
    from achilles.errors import AchillesError, ConfigurationError, InvalidInputError

    if isinstance(exc, InvalidInputError | ConfigurationError):
        return _one_line(str(exc)), 2
    if isinstance(exc, AchillesError):
        return _one_line(str(exc)), 1
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return _one_line(f"{where}{exc.strerror or exc}"), 1
    if os.environ.get(DEBUG_ENV):
        traceback.print_exc()
    return (
        f"internal error ({type(exc).__name__}: {_one_line(str(exc))}); this is a bug,"
        f" please report it with the traceback {DEBUG_ENV}=1 prints",
        1,
    )


def usage_error_line(exc: click.UsageError) -> str:
    """Click's usage errors as `<field>: <problem>`, the field spelled as the user gave it
    (the option, the argument's metavar, or the environment variable it came from)."""
    if isinstance(exc, click.NoSuchOption):
        maybe = (
            f" (did you mean {', '.join(sorted(exc.possibilities))}?)" if exc.possibilities else ""
        )
        return f"{exc.option_name}: no such option{maybe}"
    if isinstance(exc, click.BadOptionUsage):
        problem = exc.message.replace(f"Option {exc.option_name!r} ", "").rstrip(".")
        return f"{exc.option_name}: {problem}"
    if isinstance(exc, click.MissingParameter):
        return f"{_parameter_hint(exc)}: required"
    if isinstance(exc, click.BadParameter):
        return f"{_parameter_hint(exc)}: {_one_line(exc.message).rstrip('.')}"
    return _one_line(exc.format_message())


def _parameter_hint(exc: click.BadParameter) -> str:
    if exc.param_hint is not None:
        hints = [exc.param_hint] if isinstance(exc.param_hint, str) else list(exc.param_hint)
        return " / ".join(hint.strip("'\"") for hint in hints)
    param = exc.param
    if param is None:
        return "(input)"
    if isinstance(param, click.Option):
        ctx = exc.ctx
        if (
            ctx is not None
            and param.name is not None
            and ctx.get_parameter_source(param.name) is ParameterSource.ENVIRONMENT
            and isinstance(param.envvar, str)
        ):
            return param.envvar
        return max(param.opts, key=len)
    return param.human_readable_name
