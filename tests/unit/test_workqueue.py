"""The Agent workqueue (runtime/workqueue.py): the newest item of a key wins, keys
are taken in arrival order, one key is never handled by two threads at once, and a
failed key comes back after its backoff (the queue's rate-limited re-add) unless a
success forgot it."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from achilles.handlers.catalogue_queue import (
    CatalogueEvent,
    CatalogueToRead,
    catalogue_key,
    new_catalogue_queue,
)
from achilles.k8s.objects import ObjectRef
from achilles.runtime.workqueue import WorkQueue


def test_the_newest_item_of_a_waiting_key_replaces_the_older_one() -> None:
    queue: WorkQueue[str, int] = WorkQueue()
    queue.put("a", 1)
    queue.put("b", 1)
    queue.put("a", 2)
    assert len(queue) == 2
    assert queue.take(0) == ("a", 2)
    assert queue.take(0) == ("b", 1)
    assert queue.take(0) is None
    assert len(queue) == 0


def test_a_key_put_while_it_is_handled_waits_until_it_is_done() -> None:
    queue: WorkQueue[str, int] = WorkQueue()
    queue.put("a", 1)
    assert queue.waiting("a")
    assert queue.take(0) == ("a", 1)
    assert not queue.waiting("a")
    queue.put("a", 2)
    queue.put("a", 3)
    assert queue.waiting("a")
    assert queue.take(0) is None, "taken while another thread handles it"
    queue.done("a")
    assert queue.take(0) == ("a", 3)
    queue.done("a")
    assert queue.take(0) is None


def test_a_done_key_with_nothing_new_is_not_taken_again() -> None:
    queue: WorkQueue[str, int] = WorkQueue()
    queue.put("a", 1)
    assert queue.take(0) == ("a", 1)
    queue.done("a")
    queue.put("b", 1)
    assert queue.take(0) == ("b", 1)
    assert queue.take(0) is None


def test_a_waiting_thread_is_woken_by_a_put() -> None:
    queue: WorkQueue[str, int] = WorkQueue()
    taken: list[tuple[str, int] | None] = []
    thread = threading.Thread(target=lambda: taken.append(queue.take(30)))
    thread.start()
    queue.put("a", 7)
    thread.join(30)
    assert taken == [("a", 7)]


def test_threads_never_handle_one_key_at_once_and_each_key_ends_on_its_newest_item() -> None:
    queue: WorkQueue[int, int] = WorkQueue()
    keys, versions, threads = 20, 200, 4
    guard = threading.Lock()
    handling: set[int] = set()
    overlaps: list[int] = []
    last_handled: dict[int, int] = {}
    producer_done = threading.Event()

    def work() -> None:
        while True:
            taken = queue.take(0.05)
            if taken is None:
                if producer_done.is_set() and len(queue) == 0:
                    return
                continue
            key, version = taken
            with guard:
                if key in handling:
                    overlaps.append(key)
                handling.add(key)
            # Let the other threads run while this key is held (no sleep: a yield).
            for _ in range(100):
                pass
            with guard:
                handling.discard(key)
                previous = last_handled.get(key, -1)
                assert version > previous, f"key {key}: {version} handled after {previous}"
                last_handled[key] = version
            queue.done(key)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for version in range(versions):
        for key in range(keys):
            queue.put(key, version)
    producer_done.set()
    for worker in workers:
        worker.join(60)
        assert not worker.is_alive()
    assert overlaps == []
    assert last_handled == {key: versions - 1 for key in range(keys)}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_failed_key_is_added_again_after_a_doubling_backoff_up_to_a_minute() -> None:
    clock = Clock()
    queue: WorkQueue[str, int] = WorkQueue(clock)
    delays = [queue.add_rate_limited("a", n) for n in range(8)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    assert queue.take(0) is None
    assert len(queue) == 0
    assert queue.retrying("a")
    clock.now += 1
    assert queue.take(0) == ("a", 0)  # each re-add at its own time; the first is due
    queue.done("a")


def test_a_success_forgets_the_backoff_and_the_re_adds_asked_before_it_was_taken() -> None:
    clock = Clock()
    queue: WorkQueue[str, int] = WorkQueue(clock)
    queue.add_rate_limited("a", 1)
    queue.add_rate_limited("b", 1)
    queue.put("a", 2)  # a newer event, handled before the re-add is due
    assert queue.take(0) == ("a", 2)
    queue.forget("a")  # its handling succeeded
    queue.done("a")
    clock.now += 60
    assert queue.take(0) == ("b", 1)  # another key's re-add is its own
    assert queue.take(0) is None
    assert queue.add_rate_limited("a", 3) == 1.0  # the backoff starts again


def test_a_re_add_due_while_its_key_is_handled_waits_until_done() -> None:
    clock = Clock()
    queue: WorkQueue[str, int] = WorkQueue(clock)
    queue.add_rate_limited("a", 1)
    queue.put("a", 2)
    assert queue.take(0) == ("a", 2)
    clock.now += 1
    assert queue.take(0) is None, "taken while another thread handles it"
    queue.done("a")  # failed again, say: no forget
    assert queue.take(0) == ("a", 1)


def test_a_thread_waiting_to_take_wakes_when_a_re_add_falls_due() -> None:
    queue: WorkQueue[str, int] = WorkQueue()  # the real clock: 1 s
    queue.add_rate_limited("a", 1)
    started = time.monotonic()
    assert queue.take(5.0) == ("a", 1)
    assert 0.9 <= time.monotonic() - started < 4.0


def test_a_merge_keeps_what_the_waiting_item_asked_for() -> None:
    """`merge(waiting, newer)` decides the item a key waits with; a key being handled
    is not merged into (its newer item waits for the next handling as it is)."""
    queue: WorkQueue[str, frozenset[str]] = WorkQueue(merge=lambda old, new: old | new)
    queue.put("a", frozenset({"relist"}))
    queue.put("a", frozenset({"event"}))
    assert queue.take(0) == ("a", frozenset({"relist", "event"}))
    queue.put("a", frozenset({"later"}))  # while "a" is handled: not merged
    queue.done("a")
    assert queue.take(0) == ("a", frozenset({"later"}))


def test_the_catalogue_queue_keeps_a_relist_under_a_newer_event() -> None:
    """The sweeper's relist of an MCP AgentTool, then an event of it (an echo of its
    status) before a thread took the relist: the event is handled, and still lists."""
    tool = ObjectRef("AgentTool", "agenttools", "time", None, "uid-t")
    queue = new_catalogue_queue()
    key = catalogue_key(tool)
    queue.put(key, CatalogueToRead(tool, relist=True))
    event = CatalogueEvent(tool, "MODIFIED", {"name": "time"}, {}, {"observedGeneration": 1})
    queue.put(key, event)
    assert queue.take(0) == (key, replace(event, relist=True))
    queue.done(key)
    # Without a relist waiting, the newest wins as it is.
    queue.put(key, CatalogueToRead(tool))
    queue.put(key, event)
    assert queue.take(0) == (key, event)


def test_wait_handled_returns_once_the_keys_handlings_end() -> None:
    """What a listing put is handled when none of its keys waits or is being handled;
    a key put later, or a failure's re-add waiting out its backoff, does not hold it."""
    queue: WorkQueue[str, int] = WorkQueue()
    queue.put("a", 1)
    queue.put("b", 1)
    assert not queue.wait_handled(["a", "b"], 0)
    assert queue.take(0) == ("a", 1)
    queue.done("a")
    assert queue.take(0) == ("b", 1)
    assert not queue.wait_handled(["a", "b"], 0), "b is being handled"
    queue.add_rate_limited("b", 2)  # b failed: re-added after its backoff
    queue.done("b")
    queue.put("c", 1)
    assert queue.wait_handled(["a", "b"], 0)
    assert queue.wait_handled([], 0)


def test_a_thread_waiting_for_keys_wakes_when_the_last_is_done() -> None:
    queue: WorkQueue[str, int] = WorkQueue()
    queue.put("a", 1)
    answered: list[bool] = []
    waiter = threading.Thread(target=lambda: answered.append(queue.wait_handled(["a"], 30)))
    waiter.start()
    assert queue.take(30) == ("a", 1)
    queue.done("a")
    waiter.join(30)
    assert answered == [True]
