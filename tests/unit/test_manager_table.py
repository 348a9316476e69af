"""The manager's table (handlers/manager.py) is the operator's shape: docs/architecture.md
shows it row for row, every signal wakes exactly the loops it woke when each part set
their wakes itself (issue 40), each signal's emitters are the modules that emit it, and
shutdown wakes every loop."""

from __future__ import annotations

import re
import threading
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import cast

from kubernetes import client

from achilles.db import notifications
from achilles.db.database import Database
from achilles.handlers import agents, manager, manager_table
from achilles.handlers.config import OperatorConfig
from achilles.handlers.context import LoopMetrics, RuntimeContext
from achilles.handlers.controllers import listener, sweeper
from achilles.handlers.signals import EMITTED_BY, Happened
from achilles.k8s.jobs import JobTemplate, RunJobs, SecretKey
from achilles.k8s.objects import Resources
from achilles.runtime.loops import Passes
from achilles.runtime.manager import Manager, On
from achilles.runtime.wake import Wake, Wakes

ROOT = Path(__file__).resolve().parents[2]
HANDLERS = ROOT / "operator" / "achilles" / "handlers"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# Who woke whom before the table, when each part set the wakes itself.
WOKEN = {
    Happened.RUNS_CHANGED: {"dispatcher", "sweeper.budget-warnings"},
    Happened.SLOTS_MOVED: {"scheduler"},
    Happened.NOTIFICATION_WRITTEN: {"notifier"},
    Happened.OWNER_DEACTIVATED: {"sweeper.owners"},
    Happened.RECONNECTED: {
        "scheduler",
        "dispatcher",
        "notifier",
        "sweeper.owners",
        "sweeper.budget-warnings",
    },
    Happened.DISPATCHABLE: {"dispatcher"},
    Happened.PLATFORM_CHANGED: {"scheduler", "dispatcher"},
    Happened.STATUS_MOVED: {"status"},
}


def _wired() -> tuple[Wakes[Happened], Manager[RuntimeContext, Happened]]:
    wakes: Wakes[Happened] = Wakes()
    context = cast(RuntimeContext, SimpleNamespace(wakes=wakes, stop=threading.Event()))
    passes = Passes(LoopMetrics())
    return wakes, Manager(manager.CONTROLLERS, context, wakes, threading.Event(), passes)


def test_each_signal_wakes_the_loops_it_always_woke_and_no_other() -> None:
    wakes, _ = _wired()
    for signal in Happened:
        wakes.emit(signal)
        woken = {name for name, wake in _targets(wakes).items() if wake.take()}
        assert woken == WOKEN[signal], signal


def _targets(wakes: Wakes[Happened]) -> dict[str, Wake]:
    names = {"scheduler", "dispatcher", "notifier", "status", "sweeper", "listener"}
    names |= {f"sweeper.{part}" for part in sweeper.WOKEN_PASSES}
    return {name: wakes.target(name) for name in names}


def test_shutdown_wakes_every_loop() -> None:
    wakes, declared = _wired()
    declared.shutdown(0.0)
    assert all(wake.event.is_set() for wake in wakes.all())
    # Each loop's own wake among them (a name not made before would come back unset).
    for name in ("scheduler", "dispatcher", "status", "notifier", "sweeper.owners"):
        assert wakes.target(name).event.is_set(), name


def test_the_sweeper_passes_woken_are_the_ones_it_wakes() -> None:
    (declared,) = [c for c in manager.CONTROLLERS if c.name == sweeper.NAME]
    parts = {s.part for s in declared.sources if isinstance(s, On) and s.part is not None}
    assert parts == set(sweeper.WOKEN_PASSES)


def _emitters(signal: Happened) -> set[str]:
    found = set()
    for path in HANDLERS.rglob("*.py"):
        source = path.read_text()
        module = path.stem
        if f"emit(Happened.{signal.name})" in source:
            found.add(module)
        if module == "listener" and signal in listener.CHANNELS:
            found.add(module)
        moves_statuses = re.search(r"\.(mark_dirty|want_reconcile)\(", source)
        if signal is Happened.STATUS_MOVED and module != "context" and moves_statuses:
            found.add(module)
    # context.mark_dirty itself emits STATUS_MOVED on behalf of its callers.
    found.discard("context")
    return found


def test_each_signals_emitters_are_the_modules_that_emit_it() -> None:
    for signal in Happened:
        assert _emitters(signal) == set(EMITTED_BY[signal]), signal


def _documented_rows() -> list[tuple[str, ...]]:
    lines = ARCHITECTURE.read_text().split("### The manager's table", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| controller |"))
    rows = []
    for line in lines[start + 2 :]:  # past the header and its rule
        if not line.startswith("|"):
            break
        rows.append(tuple(cell.strip() for cell in line.strip().strip("|").split(" | ")))
    return rows


def test_docs_show_the_table_row_for_row() -> None:
    assert _documented_rows() == manager_table.table()


def test_the_listener_declares_the_channels_it_listens_on() -> None:
    assert set(listener.CHANNELS) == set(notifications.CHANNELS)


def _context() -> RuntimeContext:
    """A context as the operator makes one; nothing here reaches the database or the API
    server (the reconcilers are built, not run)."""
    template = JobTemplate(
        namespace="achilles-runs", image="achilles:test", database_secret=SecretKey("db", "url")
    )
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    return RuntimeContext(
        config=OperatorConfig("postgresql://nowhere/achilles", template, 0, timedelta(minutes=5)),
        database=cast(Database, object()),
        resources=cast(Resources, object()),
        jobs=RunJobs(api, template.namespace),
    )


def test_the_reconcilers_share_the_processs_handles() -> None:
    """Each reconciler the table builds holds the process's own handles, not copies: the
    status writer waits on the very event the dispatcher clears while it makes Jobs, and
    a mark from any loop lands on the queue the status writer drains and wakes it."""
    context = _context()
    writer = manager.status_writer_of(context)
    dispatching = manager.dispatcher_of(context)
    assert writer.dispatch_idle is dispatching.dispatch_idle is context.dispatch_idle
    assert writer.statuses is context.statuses
    assert writer.written is context.written_statuses
    Manager(manager.CONTROLLERS, context, context.wakes, context.stop, context.passes)  # routes
    status_wake = context.wakes.target("status")
    marking = (
        manager.scheduler_of(context).marks,
        dispatching.marks,
        manager.watchers_of(context).marks,
        manager.listener_of(context).marks,
        manager.sweeper_of(context).marks,
    )
    for agent_id, marks in enumerate(marking):
        marks.mark_dirty([agent_id])
        assert status_wake.take()
        assert writer.statuses.take() == ({agent_id}, set())
    assert manager.notifier_of(context).namespace == "achilles-runs"
    assert dispatching.job_template is context.config.job_template


def test_the_workqueues_threads_reconcile_on_the_processs_queues() -> None:
    """The Agent and catalogue workers' reconcilers hold the very queues the kopf
    handlers put on and the sweeper requeues to, and the statuses written that the
    status writer reads."""
    context = _context()
    agent = agents.reconciler_of(context)
    assert agent.queue is context.agent_queue
    assert agent.written is context.written_statuses
    assert agent.marks.statuses is context.statuses
    mirror = manager.catalogue_of(context)
    assert mirror.queue is context.catalogue_queue
    assert mirror.agent_queue is context.agent_queue is manager.sweeper_of(context).agent_queue
    assert manager.sweeper_of(context).catalogue_queue is context.catalogue_queue
    assert mirror.namespace == context.config.job_template.namespace
