"""Malformed input reported as one line, `error: <field>: <problem>`, with exit code 2.

click's `UsageError` prints the usage and a hint around the message (four lines). For
commands whose input is data (a schedule, a time) one line naming the field is what a
person or a script needs; the exit code stays click's 2 for bad input.
"""

from __future__ import annotations

from typing import IO, Any

import click


class BadInput(click.ClickException):
    """Malformed input: exit code 2, printed as one `error: ...` line on stderr."""

    exit_code = 2

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", file=file, err=file is None)


class OneLineErrorsCommand(click.Command):
    """A command whose option and argument errors are `BadInput` lines too."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise BadInput(exc.format_message()) from exc
