"""A resumable list-then-watch of one kind in one namespace (client-go's reflector, without
the cache: the caller keeps what it needs of each object).

- Lists in pages (`limit` + `continue`), so no response holds every object at once.
- Then watches from the listing's resourceVersion with bookmarks, and when the stream
  ends (its `timeout_seconds`) watches again from the last resourceVersion seen: a
  resumed watch sends only what changed since, never the objects again as ADDED.
- When the API server no longer has that resourceVersion (410 Gone, as the watch's ERROR
  event or as the response's status; or an expired `continue` token) it lists again.
- Objects stay JSON: the generated client's model objects cost far more to build than the
  few fields we read (docs/performance.md), so responses are read with
  `_preload_content=False` and each object is handed to `parse` as a dict.

Labels are selected by the server (`label_selector`). Not thread-safe: one thread follows
one `ListWatch`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

T = TypeVar("T")

GONE = 410
# A listing comes in pages of this many objects: a single list of 10,000 Agents is ~50 MB
# of JSON parsed at once, a peak the process's RSS keeps (`achilles bench intake`, which
# also times the API server's own listing in these pages).
PAGE_SIZE = 500
CONNECT_TIMEOUT = 10.0
# A silent stream outlives its own timeout by this much before the client gives up (the
# server ends it at `timeout_seconds`; bookmarks come about once a minute meanwhile).
READ_GRACE = 30.0

# kubernetes' generated `list_namespaced_*` method (with `watch=True` it watches).
ListCall = Callable[..., Any]
# A raw object (as the API's JSON) and whether it was deleted -> what the caller keeps.
Parse = Callable[[dict[str, Any], bool], T | None]


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing. `first`: a new listing starts (after a 410 it replaces what
    the caller knew); `last`: the listing is complete, every object that exists was in it."""

    items: list[T]
    first: bool
    last: bool


@dataclass(frozen=True)
class Change(Generic[T]):
    """One watch event: ADDED, MODIFIED or DELETED."""

    type: str
    item: T


@dataclass
class WatchCounts:
    """What a ListWatch asked of the API server, for tests and metrics."""

    lists: int = 0
    pages: int = 0
    watches: int = 0
    expired: int = 0  # 410s: each costs a listing
    events: dict[str, int] = field(default_factory=dict)


class Expired(Exception):
    """The resourceVersion (or continue token) is gone: list again."""


class ListWatch(Generic[T]):
    """`follow()` is one pass: list when nothing is known yet (or it expired), then watch
    until the stream ends. The next pass resumes from `resource_version`."""

    def __init__(
        self,
        call: ListCall,
        namespace: str,
        parse: Parse[T],
        *,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
        page_size: int = PAGE_SIZE,
    ) -> None:
        self.call = call
        self.namespace = namespace
        self.parse = parse
        self.label_selector = label_selector
        self.timeout_seconds = timeout_seconds
        self.page_size = page_size
        # Where the next watch starts; None: list first. A caller that failed mid-pass
        # (its consumer raised, the connection broke) may keep it: events are replayed
        # from here, none lost.
        self.resource_version: str | None = None
        self.counts = WatchCounts()

    def forget(self) -> None:
        """List again at the next pass (e.g. the caller lost track of what it folded)."""
        self.resource_version = None

    def follow(self) -> Generator[Page[T] | Change[T], None, None]:
        while True:
            if self.resource_version is None:
                yield from self._list()
            try:
                yield from self._watch()
                return
            except Expired:
                self.counts.expired += 1
                self.resource_version = None

    # --- listing ---

    def _list(self) -> Iterator[Page[T]]:
        while True:
            try:
                yield from self._pages()
                return
            except Expired:  # the continue token expired: start the listing again
                self.counts.expired += 1

    def _pages(self) -> Iterator[Page[T]]:
        self.counts.lists += 1
        token: str | None = None
        first = True
        while True:
            kwargs: dict[str, Any] = {"limit": self.page_size}
            if token:
                kwargs["_continue"] = token
            body = self._request(**kwargs)
            try:
                listing = json.loads(body)
            except ValueError as exc:
                raise ValueError(f"the API server's listing is not JSON: {exc}") from exc
            self.counts.pages += 1
            metadata = listing.get("metadata") or {}
            token = metadata.get("continue") or None
            items = [
                parsed
                for raw in listing.get("items") or []
                if (parsed := self.parse(raw, False)) is not None
            ]
            if token is None:
                # Every page is of the first one's snapshot, whose version the last carries.
                # Watched from only once the caller took the last page: a caller that
                # raised on a page gets the whole listing again.
                version = str(metadata.get("resourceVersion") or "") or None
                yield Page(items, first=first, last=True)
                self.resource_version = version
                return
            yield Page(items, first=first, last=False)
            first = False

    def _request(self, **kwargs: Any) -> bytes:
        try:
            response = self.call(
                self.namespace,
                label_selector=self.label_selector,
                _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT, CONNECT_TIMEOUT + 60.0),
                **kwargs,
            )
        except ApiException as exc:
            if exc.status == GONE:
                raise Expired(str(exc.reason)) from exc
            raise
        try:
            return bytes(response.data)
        finally:
            response.release_conn()

    # --- watching ---

    def _watch(self) -> Iterator[Change[T]]:
        self.counts.watches += 1
        try:
            response = self.call(
                self.namespace,
                label_selector=self.label_selector,
                watch=True,
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self.timeout_seconds,
                _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT, self.timeout_seconds + READ_GRACE),
            )
        except ApiException as exc:
            if exc.status == GONE:
                raise Expired(str(exc.reason)) from exc
            raise
        try:
            for line in iter_resp_lines(response):
                if not line:
                    continue
                event = json.loads(line)
                kind = str(event.get("type"))
                obj = event.get("object") or {}
                self.counts.events[kind] = self.counts.events.get(kind, 0) + 1
                if kind == "ERROR":
                    if obj.get("code") == GONE:
                        raise Expired(str(obj.get("message")))
                    raise ApiException(status=obj.get("code"), reason=str(obj.get("message")))
                if kind != "BOOKMARK" and (item := self.parse(obj, kind == "DELETED")) is not None:
                    yield Change(kind, item)
                # Only once the caller took the event (it asks for the next one): a caller
                # that raised meanwhile gets this event again from the resumed watch.
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if version:
                    self.resource_version = str(version)
        finally:
            response.close()
            response.release_conn()


def follow_until(
    watch: ListWatch[T],
    stop: threading.Event,
    on_page: Callable[[Page[T]], None],
    on_change: Callable[[Change[T]], None],
) -> None:
    """One pass of `watch` (`ListWatch.follow`), each page and change handed over in
    order, until the stream ends or `stop` is set. What raises ends the pass; the next
    resumes from the last event handed over."""
    stream = watch.follow()
    try:
        while not stop.is_set():
            item = next(stream, None)
            if item is None:
                return
            if isinstance(item, Page):
                on_page(item)
            else:
                on_change(item)
    finally:
        stream.close()
