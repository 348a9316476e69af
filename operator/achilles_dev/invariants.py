"""The seed's invariants, watched while something else runs (issue 36 item 10): the test
tiers, the fault suite (`achilles chaos`) and the cluster benchmarks (`achilles bench`)
all run it; not product (the wheel has no `achilles_dev`).

Each hole of issue 36 came from a new feature meeting an old rule in a way no test written
for the rule exercised. `InvariantMonitor` samples a stack's running run pods and its
journal on a thread of its own and records every violation it sees; whoever started it
fails its run if there is one. It is the oracle any later feature is held to:

- `two runner pods`: two run pods of one agent running at once (seed 002: one active
  run is one runner alive per agent);
- `claim under a closed lock`: a run that started between two samples that both saw its
  agent's durable lock closed (the owner's switch, the admin's lock, no model — a
  withdrawn one —, the owner missing or inactive; seed 000: the claim is the last gate);
- `closed lock wrote a row`: a `skipped` row, or a `failed` one that never started (a
  cancel aside), written between two samples that both saw its agent's lock closed (seed
  000: a closed lock leaves no trace);
- `tokens went down`: an owner's tokens of the budget week lower than at an earlier
  sample of the same week (seed 000: every token spent in the week counts);
- `reply woke twice`: two runs that answered the same reply's wake (seed 003, DESIGN §5);
- `reply never woken`: a reply owed its wake (answered, untaken, its agent free to run)
  for more than `WAKE_WITHIN` while an operator of this journal was live at every look.
  Where no operator runs (between test modules, a fault suite's operator stopped or
  frozen on purpose) an owed wake waits, rightly: the clock runs only while one does. An
  operator counts as live while one of its logins ended a transaction within
  `OPERATOR_LIVE_WITHIN` (its sweeper's reply-wakes pass alone makes one every 30 s).

Plain psycopg and the Kubernetes client, as the rest of `achilles_dev` (SQLAlchemy is the
product's `db` layer's alone). A sample is one read-only REPEATABLE READ transaction on
one kept connection, so its reads agree with each other and the windows above are the
journal's own clock; the pods are listed by the API server's own phase filter, so a
sample costs the same however many pods are pending or done. The queries read only what
can break a rule: the closed agents, the runs of agents closed at both samples, the
week's finished runs, the answered replies. docs/performance.md gives a sample's cost.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import namedtuple_row

from achilles.db.roles import GROUP_ROLES, Component
from achilles.k8s.annotations import format_run_request
from achilles.k8s.run_metadata import AGENT_ID_LABEL, RUN_SELECTOR
from achilles_dev import invariant_queries as queries

SAMPLE_EVERY = 0.5  # seconds
OPERATOR_GROUP_ROLE = GROUP_ROLES[Component.OPERATOR]
# A monitor that could sample less often than this share of its tries watched nothing
# worth the name: it says so rather than pass. A fault that stops PostgreSQL or the API
# server for a while (the fault suite does) leaves it well above.
MIN_SAMPLED_SHARE = 0.2
# The whole-journal checks (the week's tokens, the answered replies) read rows that grow
# with the journal; what they catch stays in the rows (a run gone, a second wake run), so
# they may look less often: after one that took d seconds, the next waits at least
# d * SLOW_CHECK_SPACING (at most 2 % of the time; every sample while they are cheap).
SLOW_CHECK_SPACING = 50

# (pod name, agent id label, phase): the run pods running now.
Pods = list[tuple[str, str | None, str]]
PodLister = Callable[[], Pods]

# Two of the sweeper's reply-wakes passes (`REPLY_WAKES_EVERY`, 30 s) and a margin for a
# loaded host: an owed wake that outlives this with an operator live was never asked for.
WAKE_WITHIN = 75.0  # seconds
OPERATOR_LIVE_WITHIN = 40.0  # seconds since an operator's login last ended a transaction


def libpq_url(url: str) -> str:
    """A SQLAlchemy URL (`postgresql+psycopg://`) as libpq takes it."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@dataclass(frozen=True)
class Verdict:
    """What a run reports of its monitor: its violations and how much it watched."""

    samples: int  # taken whole
    failed_samples: int
    violations: list[str]
    sample_ms_median: float  # what one whole sample took (journal and pods)
    sample_ms_max: float
    every_s: float
    slow_checks: int  # samples that also read the week's tokens and the answered replies
    slow_ms_median: float  # what those two reads took
    most_pods: int  # the most run pods one sample saw running: its pod side saw some

    @property
    def passed(self) -> bool:
        return not self.violations

    def line(self) -> str:
        verdict = "held" if self.passed else f"{len(self.violations)} violation(s)"
        failed = f", {self.failed_samples} failed" if self.failed_samples else ""
        return (
            f"invariants {verdict} ({self.samples} samples every {self.every_s:g} s{failed};"
            f" a sample {self.sample_ms_median:.1f} ms median, {self.sample_ms_max:.1f} max;"
            f" tokens and wakes read {self.slow_checks} times; at most {self.most_pods} run"
            f" pod(s) running at once)"
        )


@dataclass
class InvariantMonitor:
    database_url: str  # any login that reads the journal (the suites use the superuser)
    list_pods: PodLister
    every: float = SAMPLE_EVERY
    wake_within: float = WAKE_WITHIN
    operator_live_within: float = OPERATOR_LIVE_WITHIN
    violations: list[str] = field(default_factory=list)
    samples: int = 0  # taken whole (a sample that failed is not counted)
    failures: list[str] = field(default_factory=list)  # samples that failed, why
    # Transactions the monitor began in the journal's database (one per sample tried):
    # a benchmark that counts the database's transactions takes these off.
    transactions: int = 0
    sample_seconds: list[float] = field(default_factory=list)
    slow_checks: int = 0  # samples that also read the week's tokens and the wakes
    most_pods: int = 0  # the most run pods seen running at one sample
    slow_seconds: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _conn: psycopg.Connection[Any] | None = None
    _closed: set[int] = field(default_factory=set)  # agents closed at the last sample
    _at: datetime | None = None
    _tokens: dict[int, tuple[datetime, int]] = field(default_factory=dict)
    _seen: set[str] = field(default_factory=set)
    _slow_at: float | None = None  # time.monotonic() of the last slow check
    # Owed wakes (item, reply serial) first seen owed while an operator was live, when (the
    # journal's clock); emptied whenever a look finds no operator live.
    _owed_since: dict[tuple[int, int], datetime] = field(default_factory=dict)

    def start(self) -> InvariantMonitor:
        self._thread = threading.Thread(target=self._run, name="invariants", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Verdict:
        """Stop sampling (one last sample first); the verdict."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._try_sample(last=True)
        self._disconnect()
        tried = self.samples + len(self.failures)
        if self.failures and self.samples < MIN_SAMPLED_SHARE * tried:
            self._note(
                f"the monitor could not sample: {len(self.failures)} of {tried} samples"
                f" failed, the last: {self.failures[-1]}"
            )
        return self.verdict()

    def verdict(self) -> Verdict:
        times = sorted(self.sample_seconds) or [0.0]
        slow = sorted(self.slow_seconds) or [0.0]
        return Verdict(
            samples=self.samples,
            failed_samples=len(self.failures),
            violations=list(self.violations),
            sample_ms_median=round(times[len(times) // 2] * 1000, 2),
            sample_ms_max=round(times[-1] * 1000, 2),
            every_s=self.every,
            slow_checks=self.slow_checks,
            slow_ms_median=round(slow[len(slow) // 2] * 1000, 2),
            most_pods=self.most_pods,
        )

    def backend_pid(self) -> int | None:
        """The PostgreSQL backend of its connection (to measure what it costs the server);
        None before its first sample."""
        conn = self._conn
        return None if conn is None or conn.closed else int(conn.info.backend_pid)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._try_sample()

    def _try_sample(self, *, last: bool = False) -> None:
        try:
            self.sample(last=last)
        except Exception as exc:  # a database or API server restarting: sample later
            self.failures.append(f"{type(exc).__name__}: {exc}".strip())

    def _note(self, violation: str) -> None:
        if violation not in self._seen:
            self._seen.add(violation)
            self.violations.append(violation)

    def _connect(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                libpq_url(self.database_url),
                autocommit=True,
                row_factory=namedtuple_row,
                connect_timeout=5,
                # A sample never waits long on a lock a fault holds: it fails and retries.
                options="-c statement_timeout=5000",
                application_name="achilles-invariants",
            )
            self._conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            self._conn.read_only = True
        return self._conn

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def sample(self, *, last: bool = False) -> None:
        """One look at the journal and one at the pods; either still counts when the other
        cannot be had (an API server down says nothing about the journal). Raises the
        first failure: the sample is then not counted."""
        with self._lock:  # the thread's samples and `stop`'s last one, never at once
            started = time.perf_counter()
            failed: list[Exception] = []
            try:
                self._journal(slow=last or self._slow_due())
            except Exception as exc:
                failed.append(exc)
                self._disconnect()
            try:
                self._pods(self.list_pods())
            except Exception as exc:
                failed.append(exc)
            if failed:
                raise failed[0]
            self.samples += 1
            self.sample_seconds.append(time.perf_counter() - started)

    def _slow_due(self) -> bool:
        if self._slow_at is None or not self.slow_seconds:
            return True
        return time.monotonic() - self._slow_at >= self.slow_seconds[-1] * SLOW_CHECK_SPACING

    def _journal(self, *, slow: bool) -> None:
        conn = self._connect()
        self.transactions += 1
        with conn.transaction():
            now = conn.execute(b"SELECT now()").fetchone()[0]  # type: ignore[index]
            closed = {int(row.id) for row in conn.execute(queries.CLOSED)}
            both = sorted(closed & self._closed)
            runs = None
            if self._at is not None and both:
                runs = conn.execute(
                    queries.RUNS_SINCE, {"agents": both, "since": self._at}
                ).fetchall()
            if slow:
                started = time.perf_counter()
                owners = conn.execute(queries.TOKENS).fetchall()
                wakes = conn.execute(queries.WAKE_RUNS).fetchall()
                live = conn.execute(
                    queries.OPERATOR_LIVE,
                    {"within": self.operator_live_within, "role": OPERATOR_GROUP_ROLE},
                ).fetchone()[0]  # type: ignore[index]
                owed = conn.execute(queries.OWED_WAKES).fetchall() if live else []
        if runs is not None:
            self._gates(runs)
        if slow:
            self._budget(owners)
            self._wakes(wakes)
            self._owed(owed, now, live=bool(live))
            self.slow_checks += 1
            self.slow_seconds.append(time.perf_counter() - started)
            self._slow_at = time.monotonic()
        self._closed, self._at = closed, now

    def _pods(self, pods: Pods) -> None:
        running: dict[str, list[str]] = defaultdict(list)
        self.most_pods = max(self.most_pods, sum(phase == "Running" for _, _, phase in pods))
        for name, agent, phase in pods:
            if agent is not None and phase == "Running":
                running[agent].append(name)
        for agent, names in running.items():
            if len(names) > 1:
                self._note(f"two runner pods: agent {agent} runs {sorted(names)} at once")

    def _gates(self, runs: Sequence[Any]) -> None:
        """Runs of agents closed at the last sample and this one that moved between."""
        assert self._at is not None
        for run in runs:
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
        """An owner deleted is no owner: only those still there are compared."""
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

    def _owed(self, rows: Sequence[Any], now: datetime, *, live: bool) -> None:
        """Replies owed their wake at every look since the first one that saw them owed,
        with an operator live at each: past `wake_within`, never woken."""
        if not live:
            self._owed_since.clear()
            return
        owed = {(int(row.item), int(row.reply_serial)) for row in rows}
        self._owed_since = {key: self._owed_since.get(key, now) for key in owed}
        for (item, serial), since in self._owed_since.items():
            if (now - since).total_seconds() > self.wake_within:
                self._note(
                    f"reply never woken: item {item} reply {serial} owed its wake past"
                    f" {self.wake_within:g} s with an operator live"
                )


def pod_lister(core: Any, namespace: str) -> PodLister:
    """`InvariantMonitor.list_pods` over the Kubernetes client's CoreV1Api: the run pods of
    `namespace` the API server says are Running (its field selector), read as plain JSON
    (the client's models cost more than the listing)."""

    def listed() -> Pods:
        response = core.list_namespaced_pod(
            namespace,
            label_selector=RUN_SELECTOR,
            field_selector="status.phase=Running",
            _preload_content=False,
            _request_timeout=10,
        )
        items = json.loads(response.data).get("items") or []
        return [
            (
                _pod_name(pod["metadata"]),
                (pod["metadata"].get("labels") or {}).get(AGENT_ID_LABEL),
                str((pod.get("status") or {}).get("phase") or ""),
            )
            for pod in items
        ]

    return listed


def _pod_name(metadata: dict[str, Any]) -> str:
    """The pod's name, and when it is being deleted since when: a pod whose Job is gone
    still runs its runner until the runner exits or is killed."""
    deleting = metadata.get("deletionTimestamp")
    name = str(metadata["name"])
    return f"{name} (being deleted since {deleting})" if deleting else name
