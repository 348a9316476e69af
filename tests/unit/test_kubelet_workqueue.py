"""The stand-in's work queue: de-duplication and delayed items, on an injected clock."""

from __future__ import annotations

from achilles_dev.kubelet.workqueue import WorkQueue


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_key_queued_twice_is_handed_out_once() -> None:
    queue = WorkQueue(FakeClock())
    queue.add("a")
    queue.add("b")
    queue.add("a")
    assert [queue.get(timeout=0), queue.get(timeout=0), queue.get(timeout=0)] == ["a", "b", None]


def test_delayed_keys_come_due_in_time_order() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock)
    queue.add_after("late", 10)
    queue.add_after("soon", 2)
    assert queue.get(timeout=0) is None
    clock.now += 2
    assert queue.get(timeout=0) == "soon"
    assert queue.get(timeout=0) is None
    clock.now += 8
    assert queue.get(timeout=0) == "late"


def test_a_due_key_already_queued_is_not_duplicated() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock)
    queue.add_after("a", 1)
    queue.add("a")
    clock.now += 1
    assert [queue.get(timeout=0), queue.get(timeout=0)] == ["a", None]
