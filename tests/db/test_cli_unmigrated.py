"""A database nobody migrated yet: every command that reads or writes the journal says
to run `achilles db upgrade`, in one line with exit 1, instead of "relation ... does not
exist" with a traceback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from achilles_dev import postgres
from tests.conftest import create_database, drop_database
from tests.unit.test_cli_bad_input import (
    DATABASE_COMMANDS,
    WORKING_ARGUMENTS,
    assert_one_error_line,
    run,
)

# `db *` manage the schema itself.
SCHEMA_COMMANDS = [name for name in DATABASE_COMMANDS if not name.startswith("db ")]


@pytest.fixture(scope="module")
def empty_database(postgres_server: postgres.LocalPostgres) -> Iterator[str]:
    name = create_database(postgres_server, "achilles_test_empty")
    yield postgres_server.url(name)
    drop_database(postgres_server, name)


@pytest.mark.parametrize("name", SCHEMA_COMMANDS)
def test_a_command_on_an_unmigrated_database_says_to_upgrade(
    name: str, empty_database: str
) -> None:
    args = [*name.split(), *WORKING_ARGUMENTS[name], "--database-url", empty_database]
    line = assert_one_error_line(run(args), 1)
    assert "run `achilles db upgrade`" in line, line


def test_db_current_on_an_unmigrated_database_says_it_is_behind(empty_database: str) -> None:
    result = run(["db", "current", "--database-url", empty_database])
    assert result.exit_code == 0, result.output
    assert "behind" in result.stdout
