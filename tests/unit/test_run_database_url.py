"""The runner never waits minutes on an unreachable database: libpq's connect_timeout."""

from __future__ import annotations

import pytest

from achilles.db.database import with_connect_timeout


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u:p%40x@h:5/db", "postgresql://u:p%40x@h:5/db?connect_timeout=10"),
        ("postgresql://u@h/db?connect_timeout=3", "postgresql://u@h/db?connect_timeout=3"),
        (
            "postgresql+psycopg://u@h/db?sslmode=require",
            "postgresql+psycopg://u@h/db?connect_timeout=10&sslmode=require",
        ),
    ],
)
def test_connect_timeout_is_added_unless_set(url: str, expected: str) -> None:
    assert with_connect_timeout(url) == expected
