"""Counting the statements a database handle sends (how many a use case costs)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event

from achilles.db.database import Database


class Statements:
    """Statements the database handle sends, as the driver executes them (BEGIN and
    COMMIT are not statements the driver executes)."""

    def __init__(self, database: Database) -> None:
        self.seen: list[str] = []
        event.listen(database.engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.seen.append(" ".join(statement.split())[:120])

    @property
    def count(self) -> int:
        return len(self.seen)

    def take(self) -> list[str]:
        """The statements seen since the last take."""
        seen, self.seen = self.seen, []
        return seen
