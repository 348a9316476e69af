"""The journal as the suite reads it: plain SQL over psycopg, and the invariants every
scenario holds the rows to.

The suite reads what the product wrote; it writes only to inject a fault the way the
world would (the clock: a `next_run_at` in the past stands for an operator that was down
while slots passed) and to clean up after itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from achilles.domain.runs import FailReason, SkipReason

Row = dict[str, Any]

ACTIVE = ("queued", "running")
TERMINAL = ("succeeded", "failed", "skipped")


def libpq_url(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


class Journal:
    def __init__(self, url: str) -> None:
        self.url = libpq_url(url)

    def connect(self, *, timeout: float = 5.0) -> psycopg.Connection[Row]:
        return psycopg.connect(
            self.url, autocommit=True, row_factory=dict_row, connect_timeout=int(timeout)
        )

    def rows(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Row]:
        with self.connect() as conn:
            cursor = conn.execute(sql.encode(), params)
            return cursor.fetchall() if cursor.description else []

    def one(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Row | None:
        found = self.rows(sql, params)
        return found[0] if found else None

    def scalar(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        row = self.one(sql, params)
        return None if row is None else next(iter(row.values()))

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> int:
        with self.connect() as conn:
            return conn.execute(sql.encode(), params).rowcount

    def reachable(self) -> bool:
        try:
            with self.connect(timeout=2) as conn:
                conn.execute(b"SELECT 1")
        except psycopg.Error:
            return False
        return True

    # --- the scenario's agents and runs ------------------------------------------------

    def users(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.execute(
                "INSERT INTO users (key, active) VALUES (%s, true)"
                " ON CONFLICT (key) DO UPDATE SET active = true",
                (key,),
            )

    def agent_ids(self, namespace: str) -> dict[str, int]:
        rows = self.rows("SELECT id, cr_name FROM agents WHERE cr_namespace = %s", (namespace,))
        return {row["cr_name"]: int(row["id"]) for row in rows}

    def runs(self, namespace: str) -> list[Row]:
        return self.rows(
            "SELECT r.*, a.cr_name AS agent FROM agent_runs r JOIN agents a ON a.id = r.agent_id"
            " WHERE a.cr_namespace = %s ORDER BY r.id",
            (namespace,),
        )

    def runs_by_id(self, run_ids: Iterable[int]) -> dict[int, Row]:
        ids = list(run_ids)
        rows = self.rows("SELECT * FROM agent_runs WHERE id = ANY(%s)", (ids,))
        return {int(row["id"]): row for row in rows}

    def now(self) -> datetime:
        value = self.scalar("SELECT now()")
        assert isinstance(value, datetime)
        return value


@dataclass(frozen=True)
class Violation:
    run_id: int | None
    problem: str


# The journal's reason codes, the domain's (the schema's CHECK is spelled from them too).
FAIL_REASONS = frozenset(reason.value for reason in FailReason)
SKIP_REASONS = frozenset(reason.value for reason in SkipReason)


def malformed_rows(rows: Iterable[Row]) -> list[Violation]:
    """Rows that break the run state machine's shape (a corrupted row, whatever caused it)."""
    found = []
    for row in rows:
        run_id, state = int(row["id"]), row["state"]

        def bad(problem: str, run_id: int = run_id) -> None:
            found.append(Violation(run_id, problem))

        if row["tokens_used"] is None or row["tokens_used"] < 0:
            bad(f"tokens_used {row['tokens_used']!r}")
        if state in TERMINAL and row["finished_at"] is None:
            bad(f"{state} without finished_at")
        if state in ACTIVE and row["finished_at"] is not None:
            bad(f"{state} with finished_at")
        if state == "running" and (row["started_at"] is None or row["heartbeat_at"] is None):
            bad("running without started_at/heartbeat_at")
        if state == "succeeded" and row["output"] is None:
            bad("succeeded without output")
        if state == "failed" and (row["reason"] not in FAIL_REASONS or not row["error"]):
            bad(f"failed with reason {row['reason']!r} and error {row['error']!r}")
        if state == "skipped" and (row["reason"] not in SKIP_REASONS or row["tokens_used"] != 0):
            bad(f"skipped with reason {row['reason']!r}, tokens {row['tokens_used']}")
        if state in ACTIVE and row["reason"] is not None:
            bad(f"{state} with reason {row['reason']!r}")
    return found


def two_active(rows: Iterable[Row]) -> list[int]:
    """Agents with more than one queued/running row at once (the one-active-run lock)."""
    seen: dict[int, int] = {}
    for row in rows:
        if row["state"] in ACTIVE:
            seen[int(row["agent_id"])] = seen.get(int(row["agent_id"]), 0) + 1
    return sorted(agent for agent, count in seen.items() if count > 1)


class TerminalWatch:
    """Terminal rows must never change again: remember each one as first seen."""

    KEYS = ("state", "reason", "error", "output", "tokens_used", "finished_at", "heartbeat_at")

    def __init__(self) -> None:
        self.seen: dict[int, tuple[Any, ...]] = {}
        self.regressions: list[str] = []

    def observe(self, rows: Iterable[Row]) -> None:
        for row in rows:
            run_id = int(row["id"])
            snapshot = tuple(row[key] for key in self.KEYS)
            if run_id in self.seen:
                if self.seen[run_id] != snapshot:
                    self.regressions.append(
                        f"run {run_id} changed after it ended: {self.seen[run_id]} -> {snapshot}"
                    )
                    self.seen[run_id] = snapshot
            elif row["state"] in TERMINAL:
                self.seen[run_id] = snapshot
