"""The journal's run figures for the operator's metrics, read in one short transaction.

Runs end and are claimed by runners, not by the operator, so what they did is read from
the journal: each pass counts the runs that ended, and the claims made, in the window
since the last pass. A window closes `SETTLE` behind the database's clock: a row's
`finished_at`/`started_at` is its transaction's start, and a transaction still open
when the window closed would otherwise commit into a window already counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from achilles.db.database import Database
from achilles.db.journal.run_metrics import (
    ActiveRuns,
    EndedRuns,
    active_runs,
    claim_delays,
    ended_runs,
)
from achilles.db.journal.settings import database_now, load_settings

SETTLE = timedelta(seconds=10)


@dataclass(frozen=True)
class RunFigures:
    active: ActiveRuns
    oldest_waiting_seconds: float  # 0 when nothing waits
    max_concurrency: int
    until: datetime  # where this window closed: the next one starts here
    ended: list[EndedRuns] = field(default_factory=list)
    claim_delays: list[float] = field(default_factory=list)


def read_run_figures(
    database: Database, since: datetime | None, *, settle: timedelta = SETTLE
) -> RunFigures:
    """The journal now, and what ended or was claimed in [since, now - settle). With
    `since` None (a first pass) the window is empty: counting starts here."""
    with database.transaction() as session:
        now = database_now(session)
        until = now - settle
        active = active_runs(session)
        settings = load_settings(session)
        oldest = active.oldest_waiting_since
        figures = RunFigures(
            active=active,
            oldest_waiting_seconds=max(0.0, (now - oldest).total_seconds()) if oldest else 0.0,
            max_concurrency=settings.max_concurrency,
            until=until if since is None else max(since, until),
        )
        if since is not None and since < until:
            figures.ended.extend(ended_runs(session, since, until))
            figures.claim_delays.extend(claim_delays(session, since, until))
    return figures
