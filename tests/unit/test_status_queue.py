"""What the status writer writes when, and which Agent events the operator skips."""

from __future__ import annotations

from typing import Any

import pytest

from achilles.domain.agent_event import is_own_status_echo
from achilles.handlers.statuses import StatusQueue


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_agent_that_ran_is_written_at_once_its_siblings_in_turn() -> None:
    clock = Clock()
    queue = StatusQueue(sibling_every=30, sibling_batch=10, clock=clock)
    queue.mark([1])
    queue.mark_siblings([2, 3])
    assert queue.take() == ({1}, {2, 3})  # the first sibling turn is due at once
    queue.mark([1])
    queue.mark_siblings([2, 3])
    clock.now += 29
    assert queue.take() == ({1}, set())  # the owner's budget moved again: not yet
    queue.mark_siblings([4])
    assert queue.take() == (set(), set())
    clock.now += 1
    assert queue.take() == (set(), {2, 3, 4})  # coalesced: one write each per turn
    assert queue.take() == (set(), set())


def test_siblings_go_in_batches_longest_waiting_first() -> None:
    clock = Clock()
    queue = StatusQueue(sibling_every=10, sibling_batch=2, clock=clock)
    queue.mark_siblings([5, 1, 4])
    assert queue.take()[1] == {5, 1}
    queue.mark_siblings([1, 9])  # 1 waits again, behind 4
    clock.now += 10
    assert queue.take()[1] == {4, 1}
    queue.mark_siblings([4])  # marked again while waiting: still one write
    queue.mark_siblings([4])
    clock.now += 10
    assert queue.take()[1] == {9, 4}
    clock.now += 10
    assert queue.take()[1] == set()


def test_a_failed_pass_puts_back_what_it_took() -> None:
    clock = Clock()
    queue = StatusQueue(sibling_every=30, sibling_batch=10, clock=clock)
    queue.mark([1])
    queue.mark_siblings([2])
    now, siblings = queue.take()
    queue.put_back(now, siblings)
    assert queue.take()[0] == {1}
    queue.put_back(set(), {2})
    assert queue.take() == (set(), set())  # still waiting for the next turn
    clock.now += 30
    assert queue.take() == (set(), {2})


def test_a_wanted_reconcile_is_taken_once() -> None:
    queue = StatusQueue(sibling_every=30, sibling_batch=10, clock=Clock())
    queue.want_reconcile([7])
    assert queue.take_reconcile(7)
    assert not queue.take_reconcile(7)
    assert not queue.take_reconcile(8)


# The run-request annotation's value, the one the status says was handled.
HANDLED = "2026-12-01T09:00:00Z"
READY: dict[str, Any] = {
    "databaseId": 5,
    "phase": "Ready",
    "observedGeneration": 3,
    "lastHandledRunRequest": HANDLED,
}
META: dict[str, Any] = {"generation": 3}


def test_the_operators_own_status_write_is_an_echo() -> None:
    assert is_own_status_echo("MODIFIED", META, READY, run_request=HANDLED, cancel_request=None)
    assert is_own_status_echo("MODIFIED", META, READY, run_request=None, cancel_request=None)


@pytest.mark.parametrize(
    ("event_type", "meta", "status", "run_request", "why"),
    [
        (None, META, READY, HANDLED, "the listing at start"),
        ("ADDED", META, READY, HANDLED, "a new object"),
        ("DELETED", META, READY, HANDLED, "a deleted object"),
        ("MODIFIED", {**META, "deletionTimestamp": HANDLED}, READY, HANDLED, "deleting"),
        ("MODIFIED", {**META, "generation": 4}, READY, HANDLED, "the spec changed"),
        ("MODIFIED", META, READY, "again", "a new run request"),
        ("MODIFIED", META, {**READY, "phase": "NoModel"}, HANDLED, "a lock may open"),
        (
            "MODIFIED",
            META,
            {k: v for k, v in READY.items() if k != "databaseId"},
            HANDLED,
            "no row",
        ),
        ("MODIFIED", META, {}, HANDLED, "never reconciled"),
    ],
)
def test_everything_else_is_reconciled(
    event_type: str | None,
    meta: dict[str, Any],
    status: dict[str, Any],
    run_request: str,
    why: str,
) -> None:
    echo = is_own_status_echo(
        event_type, meta, status, run_request=run_request, cancel_request=None
    )
    assert not echo, why
