"""GET /v1/events: Server-Sent Events from LISTEN/NOTIFY, owner-filtered, resumable.

A real uvicorn, real OIDC tokens, real streaming HTTP clients (one thread each)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from achilles.api.app import create_app
from achilles.api.settings import ApiSettings
from achilles.db.database import Database
from achilles.domain.inbox import ItemState
from achilles.services import owner_events
from tests.api.conftest import Tokens
from tests.api.support import (
    RecordingRunRequester,
    add_runs,
    assert_problem,
    bearer,
    make_cr_agent,
    served,
)
from tests.db import inbox_support as box
from tests.waiting import wait_for

WAIT = 10.0


@pytest.fixture(scope="module")
def events_url(api_settings: ApiSettings, api_database: Database) -> Iterator[str]:
    """An API whose streams send a keepalive every 0.2 s (so a reader notices its stop)."""
    settings = api_settings.model_copy(update={"sse_keepalive_seconds": 0.2})
    app = create_app(settings, api_database, run_requester=RecordingRunRequester())
    with served(app) as url:
        yield url


@dataclass
class Stream:
    """One SSE connection read by a thread: its events and keepalive comments."""

    url: str
    token: str
    last_event_id: str | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    comments: int = 0
    status: int | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Stream:
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        wait_for(lambda: self.of("ready"), WAIT, what="the stream's ready event")
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(WAIT)

    def _read(self) -> None:
        headers = bearer(self.token)
        if self.last_event_id is not None:
            headers["Last-Event-ID"] = self.last_event_id
        with httpx.stream(
            "GET", f"{self.url}/v1/events", headers=headers, timeout=WAIT
        ) as response:
            self.status = response.status_code
            current: dict[str, Any] = {}
            for line in response.iter_lines():
                if self._stop.is_set():
                    return
                if line.startswith(":"):
                    self.comments += 1
                elif not line:
                    if current:
                        self.events.append(current)
                    current = {}
                else:
                    name, _, value = line.partition(":")
                    value = value.removeprefix(" ")
                    current[name] = json.loads(value) if name == "data" else value

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [event for event in list(self.events) if event.get("event") == kind]

    def item_ids(self) -> list[int]:
        return [event["data"]["item_id"] for event in self.of("inbox_item")]


def test_my_changes_arrive_and_never_another_owners(
    events_url: str, tokens: Tokens, db: Engine
) -> None:
    alice_agent = make_cr_agent(db, "alice")
    bob_agent = make_cr_agent(db, "bob")
    with Stream(events_url, tokens("alice")) as alice, Stream(events_url, tokens("bob")) as bob:
        bobs = box.ask(db, bob_agent, key="bobs").item
        mine = box.ask(db, alice_agent, key="mine").item
        box.reply(db, mine.id)
        (run_id,) = add_runs(db, alice_agent, 1)

        wait_for(lambda: alice.item_ids() == [mine.id, mine.id], WAIT, what="alice's 2 events")
        runs = wait_for(lambda: alice.of("run"), WAIT, what="alice's run event")
        assert runs[0]["data"] == {"kind": "run", "run_id": run_id, "agent_id": alice_agent}
        wait_for(lambda: bob.item_ids() == [bobs.id], WAIT, what="bob's event")
        # Delivered in commit order: bob's change came first, so it would be here by now.
        assert bobs.id not in alice.item_ids()
        assert not bob.of("run")
        assert alice.of("inbox_item")[0]["data"] == {
            "kind": "inbox_item",
            "item_id": mine.id,
            "agent_id": alice_agent,
        }
        ids = [event["id"] for event in alice.events]
        assert ids == sorted(ids, key=lambda token: tuple(int(p) for p in token.split("-")))
        wait_for(lambda: alice.comments >= 2, WAIT, what="keepalive comments")


def test_last_event_id_resumes_with_what_was_missed(
    events_url: str, tokens: Tokens, db: Engine
) -> None:
    agent = make_cr_agent(db, "alice")
    with Stream(events_url, tokens("alice")) as first:
        resume_from = first.of("ready")[0]["id"]
    missed = [box.ask(db, agent, key=f"k{i}").item.id for i in range(3)]
    box.ask(db, make_cr_agent(db, "bob"), key="not-alices")

    with Stream(events_url, tokens("alice"), last_event_id=resume_from) as resumed:
        assert resumed.item_ids() == missed  # the catch-up comes before `ready`
        assert resumed.events[-1]["event"] == "ready"
        last_seen = resumed.of("inbox_item")[-1]["id"]
        box.ask(db, agent, key="k1", state=ItemState.BLOCKED, question="Changed question?")
        wait_for(lambda: resumed.item_ids() == [*missed, missed[1]], WAIT, what="a live event")

    # Resuming from the last event seen repeats nothing before it.
    with Stream(events_url, tokens("alice"), last_event_id=last_seen) as again:
        wait_for(lambda: again.item_ids() == [missed[1]], WAIT, what="only the later event")


def test_a_resumed_stream_catches_up_past_a_hub_that_lags(
    api_settings: ApiSettings,
    api_database: Database,
    tokens: Tokens,
    db: Engine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under load the hub reads the log after a NOTIFY late; a client resuming meanwhile
    still gets all it missed before `ready` (docs/api.md#events), and each event once."""
    settings = api_settings.model_copy(update={"sse_keepalive_seconds": 0.2})
    app = create_app(settings, api_database, run_requester=RecordingRunRequester())
    hub_may_read = threading.Event()
    read_log = owner_events.settled_after

    def lagging_read(*args: Any) -> owner_events.SettledEvents:
        hub_may_read.wait(WAIT)
        return read_log(*args)

    with served(app) as url:
        agent = make_cr_agent(db, "alice")
        with Stream(url, tokens("alice")) as first:
            resume_from = first.of("ready")[0]["id"]
        monkeypatch.setattr(owner_events, "settled_after", lagging_read)
        missed = [box.ask(db, agent, key=f"lag{i}").item.id for i in range(3)]
        try:
            with Stream(url, tokens("alice"), last_event_id=resume_from) as resumed:
                assert resumed.item_ids() == missed
                assert resumed.events[-1]["event"] == "ready"
                hub_may_read.set()  # the hub catches up: what it read late is not repeated
                later = box.ask(db, agent, key="after-the-lag").item.id
                wait_for(lambda: resumed.item_ids()[3:] == [later], WAIT, what="a live event")
                assert resumed.item_ids() == [*missed, later]
        finally:
            hub_may_read.set()


def test_a_stream_needs_a_caller_and_a_well_formed_last_event_id(
    events_url: str, tokens: Tokens
) -> None:
    assert_problem(httpx.get(f"{events_url}/v1/events", timeout=WAIT), 401)
    malformed = httpx.get(
        f"{events_url}/v1/events",
        headers={**bearer(tokens("alice")), "Last-Event-ID": "yesterday"},
        timeout=WAIT,
    )
    assert_problem(malformed, 400)
