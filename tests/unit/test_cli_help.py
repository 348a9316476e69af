"""`achilles ... --help` lists each sub-command with its first sentence whole: click would
cut it to the terminal's width with "..." (group help lines ended mid-word)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from achilles.cli.main import cli, first_sentence


def groups(group: click.Group = cli, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            found += groups(command, (*path, name))
    return found


@pytest.mark.parametrize("path", groups(), ids=lambda path: " ".join(path) or "achilles")
def test_a_group_lists_whole_first_sentences(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"], terminal_width=80, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    listing = result.output.split("Commands:\n", 1)[1]
    assert "..." not in listing
    flat = " ".join(listing.split())
    group: click.Group = cli
    ctx = click.Context(cli)
    for name in path:
        sub = group.get_command(ctx, name)
        assert isinstance(sub, click.Group)
        group, ctx = sub, click.Context(sub)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        assert f"{name} {first_sentence(command.help or '')}" in flat


def test_first_sentence() -> None:
    assert first_sentence("Do this. Then that.\n\nMore.") == "Do this."
    two_lines = "One line\n  continued, e.g. this. Next."
    assert first_sentence(two_lines) == "One line continued, e.g. this."
