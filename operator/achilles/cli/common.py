"""What every CLI command shares: the database option, parameter types, output helpers.

Exit codes: 0 success; 1 the request was understood but failed (not found,
refused, database unreachable); 2 malformed input, raised as `click.UsageError`
(or `click.BadParameter`), which the `achilles` group prints as one line, as it
does every `AchillesError` (`achilles.cli.main`).

Parameters use the types here rather than click's number types, so a bad value reads
the same everywhere: `error: RUN_ID: must be a whole number (got 'abc')`
(`tests/unit/test_cli_bad_input.py` holds every command to it).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from datetime import datetime
from functools import wraps
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ParamSpec, TypeVar

import click

from achilles.db.url_text import DATABASE_URL_ENV, URL_EXAMPLE
from achilles.domain.timestamps import iso_utc
from achilles.errors import AchillesError, InvalidInputError

if TYPE_CHECKING:
    from achilles.db.database import Database

P = ParamSpec("P")
R = TypeVar("R")


class WholeNumber(click.IntRange):
    """An integer within optional bounds; a bad value says so in words."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            number = value if isinstance(value, int) else int(str(value).strip())
        except ValueError:
            self.fail(f"must be a whole number (got {value!r})", param, ctx)
        return _within(self, number, param, ctx)


class Number(click.FloatRange):
    """A number within optional bounds; a bad value says so in words."""

    name = "number"
    unit = ""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            number = value if isinstance(value, int | float) else float(str(value).strip())
        except ValueError:
            self.fail(f"must be a number{self.unit} (got {value!r})", param, ctx)
        return _within(self, number, param, ctx)


class Seconds(Number):
    """A duration in seconds within optional bounds."""

    name = "seconds"
    unit = " of seconds"


def plain_number_types(command: click.Command) -> None:
    """Give every parameter of `command` (and its sub-commands) that uses one of click's
    number types ours, with the same bounds: click words a bad value as "'abc' is not a
    valid integer range.", ours as "must be a whole number (got 'abc')"."""
    for param in command.params:
        kind = param.type
        if isinstance(kind, WholeNumber | Number):
            continue
        if isinstance(kind, click.types.IntParamType):
            bounds = _bounds_of(kind)
            param.type = WholeNumber(**bounds)
        elif isinstance(kind, click.types.FloatParamType):
            param.type = Number(**_bounds_of(kind))
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            plain_number_types(sub)


def _bounds_of(kind: click.ParamType[Any, Any]) -> dict[str, Any]:
    if not isinstance(kind, click.IntRange | click.FloatRange):
        return {}
    return {
        "min": kind.min,
        "max": kind.max,
        "min_open": kind.min_open,
        "max_open": kind.max_open,
    }


def _within(
    kind: click.IntRange | click.FloatRange,
    number: float,
    param: click.Parameter | None,
    ctx: click.Context | None,
) -> float:
    low, high = kind.min, kind.max
    too_low = low is not None and (number <= low if kind.min_open else number < low)
    too_high = high is not None and (number >= high if kind.max_open else number > high)
    if too_low or too_high:
        lower = f"more than {low}" if kind.min_open else f"at least {low}"
        upper = f"less than {high}" if kind.max_open else f"at most {high}"
        if low is None or high is None:
            bounds = lower if high is None else upper
        elif kind.min_open or kind.max_open:
            bounds = f"{lower} and {upper}"
        else:
            bounds = f"between {low} and {high}"
        kind.fail(f"must be {bounds} (got {number})", param, ctx)
    return number


class UserKey(click.ParamType[str, Any]):
    """A user key as Agents name their owner (`achilles.domain.users`, the CRD's pattern)."""

    name = "user"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from achilles.domain.users import check_user_key

        try:
            return check_user_key(str(value))
        except InvalidInputError as exc:
            self.fail(str(exc), param, ctx)


class DatabaseUrl(click.ParamType[str, Any]):
    """A PostgreSQL URL, checked before anything connects (`achilles.db.database.parse_url`;
    with `full=False` by libpq alone, `achilles.db.run_claim.libpq_url`: no SQLAlchemy)."""

    name = "url"

    def __init__(self, *, full: bool = True) -> None:
        self.full = full

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            if self.full:
                from achilles.db.database import parse_url

                parse_url(str(value))
            else:
                from achilles.db.run_claim import libpq_url

                libpq_url(str(value))
        except InvalidInputError as exc:
            self.fail(str(exc), param, ctx)
        return str(value)


class HttpEndpoint(click.ParamType[str, Any]):
    """An `http://HOST[:PORT]/PATH` a server of ours listens on, or '' for none."""

    name = "url"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from urllib.parse import urlsplit

        text = str(value)
        if text == "":
            return text
        try:
            parts = urlsplit(text)
            parts.port  # noqa: B018 - raises on a port that is not a number in range
        except ValueError:
            parts = None
        if parts is None or parts.scheme != "http" or not parts.hostname:
            self.fail(
                f"must be an http://HOST:PORT/PATH URL, or '' for none (got {text!r})", param, ctx
            )
        return text


def _require_database_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    if value is None and not ctx.resilient_parsing:
        raise click.BadParameter(
            f"not set (pass --database-url or set {DATABASE_URL_ENV}, e.g. {URL_EXAMPLE})",
            ctx=ctx,
            param=param,
        )
    return value or ""


def _database_url_option(url_type: DatabaseUrl) -> Callable[[Callable[P, R]], Callable[P, R]]:
    return click.option(
        "--database-url",
        envvar=DATABASE_URL_ENV,
        type=url_type,
        callback=_require_database_url,
        metavar="URL",
        help=f"PostgreSQL URL  [env: {DATABASE_URL_ENV}]",
    )


database_url_option = _database_url_option(DatabaseUrl())
# The runner's: checked by libpq alone, so that its claim, the run's first heartbeat, does
# not wait for SQLAlchemy's import (`achilles.db.run_claim`).
claim_database_url_option = _database_url_option(DatabaseUrl(full=False))


def kubeconfig_option(purpose: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """`--kubeconfig` for commands that talk to the cluster (`achilles.k8s.client` picks the
    kubeconfig named here, else the default one, else the pod's service account)."""
    return click.option(
        "--kubeconfig",
        type=click.Path(dir_okay=False, path_type=Path),
        envvar="KUBECONFIG",
        default=None,
        help=f"{purpose}  [env: KUBECONFIG; default ~/.kube/config]",
    )


@functools.cache
def open_database(url: str | None) -> Database:
    """The process's one database handle (`--database-url`, else ACHILLES_DATABASE_URL)."""
    from achilles.db.database import Database

    return Database.from_url_or_env(url, pool_size=2, application_name="achilles-cli")


class CommandFailed(click.ClickException):
    """A well-formed request that could not be carried out: exit code 1."""

    exit_code = 1

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", file=file, err=file is None)


def reports_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn the engine's errors into one-line messages with the documented exit codes."""

    @wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except InvalidInputError as exc:
            raise click.UsageError(str(exc)) from exc
        except AchillesError as exc:
            raise CommandFailed(str(exc)) from exc

    return wrapper


def _json_default(value: object) -> object:
    if isinstance(value, datetime):
        return iso_utc(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def echo_json(value: object) -> None:
    click.echo(json.dumps(value, default=_json_default, indent=2))


def echo_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    click.echo("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
