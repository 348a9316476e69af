"""A runner whose database goes away right after its claim, before its model call, or as
it ends waits for it (the `postgres-outage` fault scenario stops PostgreSQL in that
window), and nothing else is retried; the pool's own disconnection errors count as the
database unreachable."""

from __future__ import annotations

import pytest

from achilles.errors import DatabaseUnavailable
from achilles.runner import reach


def test_an_unreachable_database_is_tried_again_until_it_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reach, "REACH_FIRST_SECONDS", 0.0)
    answers: list[object] = [DatabaseUnavailable("down"), DatabaseUnavailable("down"), "spec"]

    def load() -> object:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert reach.when_reachable("reading the run", load) == "spec"
    assert answers == []


def test_any_other_error_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reach, "REACH_FIRST_SECONDS", 0.0)
    calls = []

    def load() -> object:
        calls.append(1)
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        reach.when_reachable("reading the run", load)
    assert len(calls) == 1


def test_the_pools_disconnection_errors_are_the_database_unreachable() -> None:
    """`InvalidatePoolError` (the pool invalidated while this thread held a connection, as
    a runner saw during an outage) is a `DatabaseUnavailable`, waited out like the rest."""
    from sqlalchemy.exc import DisconnectionError, InvalidatePoolError

    from achilles.db.database import Database, outage

    database = Database("postgresql://nobody@127.0.0.1:1/none")
    for error in (InvalidatePoolError("pool invalidated"), DisconnectionError("gone")):
        with (
            pytest.raises(DatabaseUnavailable, match="database unreachable") as raised,
            database.connection_errors(),
        ):
            raise error
        assert raised.value.__cause__ is error
        assert outage(raised.value) == str(raised.value)
        assert outage(error) is not None
    database.dispose()
