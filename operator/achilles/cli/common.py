"""What every CLI command shares: the database option, error mapping, output helpers.

Exit codes: 0 success; 1 the request was understood but failed (not found,
refused, database unreachable); 2 malformed input, raised as `click.UsageError`
(or `click.BadParameter`), which the `achilles` group prints as one line.
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

from achilles.domain.timestamps import iso_utc
from achilles.errors import AchillesError, InvalidInputError

if TYPE_CHECKING:
    from achilles.db.database import Database

P = ParamSpec("P")
R = TypeVar("R")

database_url_option = click.option(
    "--database-url",
    envvar="ACHILLES_DATABASE_URL",
    metavar="URL",
    help="PostgreSQL URL  [env: ACHILLES_DATABASE_URL]",
)


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
