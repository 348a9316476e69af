"""The manager's table as docs/architecture.md shows it, read from the controllers
manager.py declares (tests/unit/test_manager_table.py holds the page to it)."""

from __future__ import annotations

from achilles.handlers.manager import CONTROLLERS, Declared
from achilles.handlers.signals import EMITTED_BY, Happened
from achilles.runtime.manager import Channel, ListWatch, On, Requeue, Source, Stream, Timer


def _source(source: Source[Happened]) -> str:
    if isinstance(source, Stream):
        return f"{source.via} stream of {source.kind}"
    if isinstance(source, ListWatch):
        return f"list+watch of {source.kind}"
    if isinstance(source, Channel):
        return f"NOTIFY {source.name}"
    if isinstance(source, Timer):
        return f"timer {source.seconds:g} s ({source.what})"
    if isinstance(source, Requeue):
        return f"requeued by {source.by}"
    part = f" ({source.part} pass)" if source.part else ""
    return f"`{source.signal}`{part}"


def _retry(controller: Declared) -> str:
    pace = f"; a woken pass {controller.pace:g} s after the last at the soonest"
    paced = pace if controller.pace else ""
    if controller.retry is None:
        return paced  # a failure's retry is its queue's, in its queue column
    return f"{paced}; a failed pass again after {controller.retry}"


def table() -> list[tuple[str, str, str, str, str]]:
    """The manager's table as docs/architecture.md shows it: controller (threads),
    sources, queue, reconcile, who wakes it (the emitters of its `On` signals)."""
    rows = []
    for controller in CONTROLLERS:
        threads = f" ({controller.threads} threads)" if controller.threads > 1 else ""
        emitters: dict[str, None] = {}
        for source in controller.sources:
            if isinstance(source, On):
                emitters.update(dict.fromkeys(EMITTED_BY[source.signal]))
        rows.append(
            (
                f"{controller.name}{threads}",
                "; ".join(_source(source) for source in controller.sources),
                controller.queue,
                f"`{controller.reconcile}`{_retry(controller)}",
                ", ".join(emitters) or "none (its sources only)",
            )
        )
    return rows
