"""A runner whose database goes away right after its claim waits for it (the
`postgres-outage` fault scenario stops PostgreSQL in that window), and nothing else is
retried."""

from __future__ import annotations

import pytest

from achilles.errors import DatabaseUnavailable
from achilles.runner import claimed


def test_an_unreachable_database_is_tried_again_until_it_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(claimed, "REACH_FIRST_SECONDS", 0.0)
    answers: list[object] = [DatabaseUnavailable("down"), DatabaseUnavailable("down"), "spec"]

    def load() -> object:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert claimed._when_reachable("reading the run", load) == "spec"
    assert answers == []


def test_any_other_error_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claimed, "REACH_FIRST_SECONDS", 0.0)
    calls = []

    def load() -> object:
        calls.append(1)
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        claimed._when_reachable("reading the run", load)
    assert len(calls) == 1
