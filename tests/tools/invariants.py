"""The seed's invariants, watched while other tests run (issue 36 item 10): test
scaffolding, not product.

Each hole of issue 36 came from a new feature meeting an old rule in a way no test written
for the rule exercised. `InvariantMonitor` samples the cluster's run pods and the journal
on a thread of its own while a tier runs (the cluster tier's chart install starts one for
the session, `tests/cluster/install/conftest.py`) and records every violation it sees;
the session fails if there is one. It is an oracle any later feature is held to:

- `two runner pods`: two run pods of one agent running at once (seed 002: one active
  run is one runner alive per agent);
- `claim under a closed lock`: a run that started between two samples that both saw its
  agent's durable lock closed (seed 000: the claim is the last gate);
- `closed lock wrote a row`: a `skipped` row, or a `failed` one that never started (a
  cancel aside), written between two samples that both saw its agent's lock closed (seed
  000: a closed lock leaves no trace);
- `tokens went down`: an owner's tokens of the budget week lower than at an earlier
  sample of the same week (seed 000: every token spent in the week counts);
- `reply woke twice`: two runs that answered the same reply's wake (seed 003, DESIGN §5).

Whether a reply is woken at all is left out: between modules no operator runs, and an owed
wake then waits, rightly. Samples read the database's clock, so the windows above are
the journal's own.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, text

from achilles.k8s.annotations import format_run_request
from achilles.k8s.run_metadata import AGENT_ID_LABEL, RUN_SELECTOR

SAMPLE_EVERY = 0.5  # seconds

_LOCKS = text(
    """
    SELECT now() AS at, a.id, a.user_id,
           NOT (a.enabled AND NOT a.admin_paused AND a.model_id IS NOT NULL
                AND coalesce(u.active, false)) AS closed
    FROM agents a LEFT JOIN users u ON u.id = a.user_id
    """
)
_RUNS_SINCE = text(
    """
    SELECT id, agent_id, state, reason, created_at, started_at
    FROM agent_runs
    WHERE created_at > :since OR started_at > :since
    """
)
# The owner's tokens of the week, as `db/journal/usage.py` sums them; the week's start as
# the claim computes it (0017).
_TOKENS = text(
    """
    WITH week AS (
        SELECT ((d - (extract(isodow FROM d)::int % 7))::timestamp AT TIME ZONE s.timezone)
               AS start
        FROM platform_settings s,
             LATERAL (SELECT (now() AT TIME ZONE s.timezone)::date AS d) local
        WHERE s.id = 1
    )
    SELECT u.id AS owner, week.start,
           coalesce((SELECT sum(r.tokens_used) FROM agent_runs r JOIN agents a ON a.id = r.agent_id
                     WHERE a.user_id = u.id AND r.finished_at >= week.start), 0)
         + coalesce((SELECT sum(d.tokens_used) FROM deleted_agent_tokens d
                     WHERE d.user_id = u.id AND d.finished_at >= week.start), 0) AS tokens
    FROM users u, week
    """
)
_WAKE_RUNS = text(
    """
    SELECT i.id AS item, i.reply_serial, i.handled_at, r.id AS run, r.request_key
    FROM agent_inbox_items i
    JOIN agent_runs r ON r.agent_id = i.agent_id AND r.request_key IS NOT NULL
                     AND r.created_at >= i.handled_at
    WHERE i.handled_at IS NOT NULL
      AND NOT (r.state = 'skipped' AND r.reason = 'already_running')
      AND NOT (r.state = 'failed' AND r.reason = 'cancelled' AND r.started_at IS NULL)
    """
)


@dataclass
class InvariantMonitor:
    journal: Engine
    # The run pods now: (pod name, agent id label, phase), from the runs namespace.
    list_pods: Callable[[], list[tuple[str, str | None, str]]]
    violations: list[str] = field(default_factory=list)
    samples: int = 0  # taken whole (a sample that failed is not counted)
    failures: list[str] = field(default_factory=list)  # samples that failed, why
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _closed: dict[int, bool] = field(default_factory=dict)  # agent -> closed at last sample
    _at: datetime | None = None
    _tokens: dict[int, tuple[datetime, int]] = field(default_factory=dict)
    _seen: set[str] = field(default_factory=set)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="invariants", daemon=True)
        self._thread.start()

    def stop(self) -> list[str]:
        """Stop sampling (one last sample first); every violation seen."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.sample()
        if self.failures and self.samples < len(self.failures):
            # Mostly failed samples watch nothing: say so rather than pass.
            self._note(f"the monitor could not sample: {self.failures[-1]}")
        return self.violations

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY):
            try:
                self.sample()
            except Exception as exc:  # a database or API server restarting: sample later
                self.failures.append(repr(exc))

    def _note(self, violation: str) -> None:
        if violation not in self._seen:
            self._seen.add(violation)
            self.violations.append(violation)

    def sample(self) -> None:
        self._pods()
        with self.journal.begin() as conn:
            locks = conn.execute(_LOCKS).all()
            now = locks[0].at if locks else conn.execute(text("SELECT now()")).scalar_one()
            closed = {row.id: bool(row.closed) for row in locks}
            if self._at is not None:
                runs = conn.execute(_RUNS_SINCE, {"since": self._at}).all()
                self._gates(runs, closed)
            self._budget(conn.execute(_TOKENS).all())
            self._wakes(conn.execute(_WAKE_RUNS).all())
        self._closed, self._at = closed, now
        self.samples += 1

    def _pods(self) -> None:
        running: dict[str, list[str]] = defaultdict(list)
        for name, agent, phase in self.list_pods():
            if agent is not None and phase == "Running":
                running[agent].append(name)
        for agent, pods in running.items():
            if len(pods) > 1:
                self._note(f"two runner pods: agent {agent} runs {sorted(pods)} at once")

    def _gates(self, runs: Sequence[Any], closed: dict[int, bool]) -> None:
        """Runs that moved between the last sample and this one, both of which saw their
        agent's durable lock closed."""
        assert self._at is not None
        for run in runs:
            if not (self._closed.get(run.agent_id) and closed.get(run.agent_id)):
                continue
            if run.started_at is not None and run.started_at > self._at:
                self._note(f"claim under a closed lock: run {run.id} of agent {run.agent_id}")
            wrote = run.state == "skipped" or (
                run.state == "failed" and run.started_at is None and run.reason != "cancelled"
            )
            if wrote and run.created_at > self._at:
                self._note(
                    f"closed lock wrote a row: run {run.id} of agent {run.agent_id}"
                    f" ({run.state}/{run.reason})"
                )

    def _budget(self, owners: Sequence[Any]) -> None:
        for row in owners:
            tokens = int(row.tokens)
            before = self._tokens.get(row.owner)
            if before is not None and before[0] == row.start and tokens < before[1]:
                self._note(
                    f"tokens went down: owner {row.owner} from {before[1]} to {tokens}"
                    f" in the week of {row.start.isoformat()}"
                )
            self._tokens[row.owner] = (row.start, tokens)

    def _wakes(self, rows: Sequence[Any]) -> None:
        """Runs made for the same reply's wake: its request key is the reply's value, with
        `+n` after `n` lost wakes (`services/reply_wakes.py`)."""
        answered: dict[tuple[int, int], set[int]] = defaultdict(set)
        for row in rows:
            value = format_run_request(row.handled_at)
            key = str(row.request_key)
            if key == value or key.startswith(f"{value}+"):
                answered[(row.item, row.reply_serial)].add(row.run)
        for (item, serial), runs in answered.items():
            if len(runs) > 1:
                self._note(f"reply woke twice: item {item} reply {serial}: runs {sorted(runs)}")


def pod_lister(core: Any, namespace: str) -> Callable[[], list[tuple[str, str | None, str]]]:
    """`InvariantMonitor.list_pods` over the Kubernetes client's CoreV1Api."""

    def listed() -> list[tuple[str, str | None, str]]:
        pods = core.list_namespaced_pod(namespace, label_selector=RUN_SELECTOR).items
        return [
            (
                pod.metadata.name,
                (pod.metadata.labels or {}).get(AGENT_ID_LABEL),
                str(pod.status.phase if pod.status else ""),
            )
            for pod in pods
        ]

    return listed
