"""`achilles inbox` as a person runs it: a real process against the real database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import Engine, text

from achilles.domain.inbox import ItemState, ReplyChannel
from tests.db import inbox_support as box
from tests.db.factories import make_agent, make_owner


def achilles(
    database_url: str, *args: str, stdin: str | None = None, kubeconfig: str = os.devnull
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ACHILLES_DATABASE_URL": database_url, "KUBECONFIG": kubeconfig}
    return subprocess.run(
        [sys.executable, "-m", "achilles", "inbox", *args],
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        timeout=300,
        check=False,
    )


def as_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode in (0, 3), result.stderr
    return json.loads(result.stdout)


def test_list_filters_and_shows_whose_turn_it_is(db: Engine, database_url: str) -> None:
    alice = make_owner(db, "alice")
    mine = make_agent(db, alice, name="digest")
    other = make_agent(db)
    waiting = box.ask(db, mine, key="db", question="Which database?").item
    answered = box.ask(db, mine, key="region", question="Which region?").item
    tracked = box.ask(db, mine, key="dep", question="Data export ready?", state=ItemState.TRACKED)
    box.ask(db, other, key="db", question="Someone else's question?")
    box.reply(db, answered.id, "eu-west")

    records = as_json(achilles(database_url, "list", "--owner", "alice", "--json"))
    assert [(r["id"], r["agent"], r["owner"], r["status"]) for r in records] == [
        (waiting.id, "digest", "alice", "waiting for a human"),
        (answered.id, "digest", "alice", "answered, not taken"),
        (tracked.item.id, "digest", "alice", "agent's"),
    ]
    blocked = as_json(
        achilles(database_url, "list", "--agent", "digest", "--state", "blocked", "--json")
    )
    assert [r["id"] for r in blocked] == [waiting.id, answered.id]
    pending = as_json(achilles(database_url, "list", "--unprocessed", "--json"))
    assert [r["id"] for r in pending] == [answered.id]

    table = achilles(database_url, "list", "--agent", str(mine))
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["ID", "AGENT", "KEY", "STATE", "STATUS", "REV", "REPLY", "QUESTION"]
    assert "inbox/answer" in lines[2]
    assert len(lines) == 4


def test_list_input_errors(db: Engine, database_url: str) -> None:
    unknown_owner = achilles(database_url, "list", "--owner", "nobody")
    assert unknown_owner.returncode == 1
    assert "owner 'nobody' does not exist" in unknown_owner.stderr
    bad_state = achilles(database_url, "list", "--state", "waiting")
    assert bad_state.returncode == 2
    assert "--state" in bad_state.stderr


def test_show_an_item_in_full(db: Engine, database_url: str) -> None:
    agent_id = make_agent(db)
    item = box.ask(db, agent_id, context="Finance moved to MySQL.").item
    box.reply(db, item.id, "Use MySQL then", channel=ReplyChannel.CHAT)
    box.take(db, item.id)
    box.acknowledge(db, item.id, 1, "switched the report to MySQL")

    record = as_json(achilles(database_url, "show", str(item.id), "--json"))
    assert record["reply"]["text"] == "Use MySQL then"
    assert record["reply"]["channel"] == "chat"
    assert record["reply"]["outcome"] == "switched the report to MySQL"
    assert (record["board_version"], record["wake_on_reply"]) == (2, False)

    shown = achilles(database_url, "show", str(item.id))
    assert shown.returncode == 0
    assert "Finance moved to MySQL." in shown.stdout
    assert "reply #1 (answer, via chat" in shown.stdout
    assert "switched the report to MySQL" in shown.stdout

    missing = achilles(database_url, "show", "999999")
    assert missing.returncode == 1
    assert "inbox item 999999 does not exist" in missing.stderr
    assert achilles(database_url, "show", "zero").returncode == 2


def test_reply_channels_and_exit_codes(db: Engine, database_url: str) -> None:
    agent_id = make_agent(db)
    item = box.ask(db, agent_id).item

    first = achilles(database_url, "reply", str(item.id), "--text", "Postgres", "--channel", "chat")
    assert first.returncode == 0, first.stderr
    assert f"reply #1 written to item {item.id} (answer, via chat)" in first.stdout

    before = box.raw_row(db, item.id)
    refused = achilles(database_url, "reply", str(item.id), "--text", "again", "--channel", "chat")
    assert refused.returncode == 3  # refused by the chat rule: not an error
    assert refused.stderr == ""
    assert "chat reply not written" in refused.stdout
    assert box.raw_row(db, item.id) == before

    replaced = as_json(
        achilles(
            database_url,
            "reply",
            str(item.id),
            "--text",
            "-",
            "--clarify",
            "--json",
            stdin="What is 'the report'?",
        )
    )
    assert replaced["accepted"]
    assert replaced["item"]["reply"]["kind"] == "clarify"
    assert replaced["item"]["reply"]["text"] == "What is 'the report'?"
    assert replaced["item"]["reply"]["serial"] == 2
    assert replaced["wake"] == {"requested": False, "delivered": False}

    refused_json = achilles(
        database_url, "reply", str(item.id), "--text", "x", "--channel", "chat", "--json"
    )
    assert refused_json.returncode == 3
    assert json.loads(refused_json.stdout)["accepted"] is False

    box.take(db, item.id)
    after_take = achilles(
        database_url, "reply", str(item.id), "--text", "chat now", "--channel", "chat"
    )
    assert after_take.returncode == 0


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["reply", "1", "--text", "   "], 2, "reply: must not be blank"),
        (["reply", "1"], 2, "--text"),
        (["reply", "1", "--text", "x", "--channel", "email"], 2, "--channel"),
        (["reply", "0", "--text", "x"], 2, "ITEM"),
        (["reply", "999999", "--text", "x"], 1, "inbox item 999999 does not exist"),
    ],
)
def test_reply_input_errors(
    db: Engine, database_url: str, args: list[str], code: int, message: str
) -> None:
    result = achilles(database_url, *args)
    assert result.returncode == code
    assert message in result.stderr


def test_wake_on_reply_is_the_owners_switch(db: Engine, database_url: str) -> None:
    agent_id = make_agent(db, name="waker")
    blocked = box.ask(db, agent_id, key="b").item
    tracked = box.ask(db, agent_id, key="t", state=ItemState.TRACKED).item

    off = as_json(achilles(database_url, "reply", str(blocked.id), "--text", "x", "--json"))
    assert off["wake"] == {"requested": False, "delivered": False}

    switched = achilles(database_url, "wake-on-reply", "waker", "--on")
    assert switched.stdout.strip() == f"agent {agent_id}: wake on reply on"
    shown = achilles(database_url, "wake-on-reply", str(agent_id))
    assert shown.stdout.strip() == f"agent {agent_id}: wake on reply on"

    # No Agent resource on record (a standalone install): requested, said so, reply kept.
    no_cr = achilles(database_url, "reply", str(blocked.id), "--text", "y")
    assert no_cr.returncode == 0
    assert "warning: wake-on-reply is on but the agent has no Agent resource" in no_cr.stderr

    # An Agent resource on record but no cluster configured: requested, not delivered.
    with db.begin() as conn:
        conn.execute(
            text("UPDATE agents SET cr_namespace = 'team-a', cr_name = 'waker' WHERE id = :a"),
            {"a": agent_id},
        )
    no_cluster = as_json(achilles(database_url, "reply", str(blocked.id), "--text", "z", "--json"))
    assert no_cluster["accepted"]
    assert no_cluster["wake"]["requested"] is True
    assert no_cluster["wake"]["delivered"] is False
    # The client's text (which kubeconfig, the API server's address) is not shown (issue 37).
    assert no_cluster["wake"]["detail"] == (
        "run not requested: the cluster's API server cannot be reached right now"
    )
    assert "/dev/null" not in json.dumps(no_cluster)

    # Only a reply that unblocks the agent wakes it.
    on_tracked = as_json(
        achilles(database_url, "reply", str(tracked.id), "--text", "fyi", "--json")
    )
    assert on_tracked["wake"]["requested"] is False

    assert achilles(database_url, "wake-on-reply", "waker", "--off").stdout.strip().endswith("off")


def test_parallel_reply_processes_lose_nothing(db: Engine, database_url: str) -> None:
    """Many `achilles inbox reply` processes at once on one item: every inbox reply gets its
    own serial, chat replies never land on an untaken reply, the last serial is the row's."""
    agent_id = make_agent(db)
    item = box.ask(db, agent_id).item
    channels = ["inbox", "chat"] * 8

    def reply(index: int) -> dict[str, Any]:
        result = achilles(
            database_url,
            "reply",
            str(item.id),
            "--text",
            f"r{index}",
            "--channel",
            channels[index],
            "--json",
        )
        return {"code": result.returncode, **as_json(result)}

    with ThreadPoolExecutor(max_workers=len(channels)) as pool:
        results = list(pool.map(reply, range(len(channels))))

    accepted = [r for r in results if r["accepted"]]
    assert all(r["code"] == 0 for r in accepted)
    assert all(r["code"] == 3 for r in results if not r["accepted"])
    assert all(r["accepted"] for r, ch in zip(results, channels, strict=True) if ch == "inbox")
    serials = sorted(r["item"]["reply_serial"] for r in accepted)
    assert serials == list(range(1, len(accepted) + 1))
    last = max(accepted, key=lambda r: r["item"]["reply_serial"])
    final, version = box.read(db, item.id)
    assert final.reply is not None
    assert final.reply.text == last["item"]["reply"]["text"]
    assert (final.revision, version) == (1 + len(accepted), 1 + len(accepted))
    # Nobody took anything, so a chat reply can only have been the very first reply.
    chat_accepted = [r for r in accepted if r["item"]["reply"]["channel"] == "chat"]
    assert all(r["item"]["reply_serial"] == 1 for r in chat_accepted)
    assert box.unprocessed(db, agent_id) == [item.id]


def test_agent_side_commands_for_operators(db: Engine, database_url: str) -> None:
    agent_id = make_agent(db, name="helper")
    asked = as_json(
        achilles(database_url, "agent", "ask", "helper", "--key", "k", "--question", "Q?", "--json")
    )
    assert (asked["result"], asked["revision"], asked["board_version"]) == ("created", 1, 1)
    item = str(asked["id"])
    same = achilles(database_url, "agent", "ask", str(agent_id), "--key", "k", "--question", "Q?")
    assert same.stdout.strip() == f"item {item} unchanged: revision 1, board version 1"

    nothing = achilles(database_url, "agent", "take", item)
    assert nothing.stdout.strip() == f"item {item}: nothing to take"
    achilles(database_url, "reply", item, "--text", "A!")

    stale = achilles(
        database_url, "agent", "advance", item, "--revision", "1", "--board-version", "1",
        "--state", "done", "--json",
    )  # fmt: skip
    assert stale.returncode == 3
    assert json.loads(stale.stdout)["refused"] == "InboxConflict"
    assert json.loads(stale.stdout)["current_revision"] == 2
    pending = achilles(
        database_url, "agent", "advance", item, "--revision", "2", "--board-version", "2",
        "--state", "done",
    )  # fmt: skip
    assert pending.returncode == 3
    assert "unprocessed human reply" in pending.stdout

    early_ack = achilles(database_url, "agent", "ack", item, "--serial", "1", "--outcome", "x")
    assert early_ack.returncode == 3
    assert "not_taken" in early_ack.stdout
    took = as_json(achilles(database_url, "agent", "take", item, "--json"))
    assert took["item"]["reply"]["text"] == "A!"
    acked = achilles(database_url, "agent", "ack", item, "--serial", "1", "--outcome", "done it")
    assert (acked.returncode, acked.stdout.strip()) == (0, f"item {item}, reply #1: acknowledged")
    moved = achilles(
        database_url, "agent", "advance", item, "--revision", "2", "--board-version", "2",
        "--state", "done",
    )  # fmt: skip
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.strip() == f"item {item} is done: revision 3, board version 3"
    forbidden = achilles(
        database_url, "agent", "advance", item, "--revision", "3", "--board-version", "3",
        "--state", "na",
    )  # fmt: skip
    assert forbidden.returncode == 3
    assert "cannot move from done to na" in forbidden.stdout


def test_asking_the_same_question_again_writes_nothing_whatever_the_state(
    db: Engine, database_url: str
) -> None:
    """docs/inbox.md: the same question again writes nothing. `--state` used to default to
    blocked, so asking again reopened a closed (done) item."""
    make_agent(db, name="helper")
    ask = ("agent", "ask", "helper", "--key", "k", "--question", "Ship it?", "--json")
    created = as_json(achilles(database_url, *ask))
    assert (created["state"], created["revision"]) == ("blocked", 1)
    item = str(created["id"])
    done = achilles(
        database_url, "agent", "advance", item, "--revision", "1", "--board-version", "1",
        "--state", "done",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    again = as_json(achilles(database_url, *ask))
    assert (again["result"], again["state"], again["revision"]) == ("unchanged", "done", 2)
    # A change of state is versioned (seed 003): refused without what was read.
    unversioned = achilles(database_url, *ask, "--state", "blocked")
    assert unversioned.returncode == 3
    refusal = as_json(unversioned)
    assert refusal["refused"] == "InboxVersionRequired"
    assert (refusal["current_revision"], refusal["current_board_version"]) == (2, 2)
    reopened = as_json(
        achilles(
            database_url, *ask, "--state", "blocked", "--revision", "2", "--board-version", "2"
        )
    )
    assert (reopened["result"], reopened["state"], reopened["revision"]) == (
        "updated",
        "blocked",
        3,
    )


def test_acknowledging_a_reply_that_never_came_says_so(db: Engine, database_url: str) -> None:
    make_agent(db, name="helper")
    item = str(
        as_json(
            achilles(
                database_url, "agent", "ask", "helper", "--key", "k", "--question", "Q?", "--json"
            )
        )["id"]
    )
    none_yet = achilles(database_url, "agent", "ack", item, "--serial", "2", "--outcome", "x")
    assert none_yet.returncode == 1
    assert none_yet.stderr == f"error: item {item} has no reply #2 (nobody has replied yet)\n"
    achilles(database_url, "reply", item, "--text", "A!")
    later = achilles(database_url, "agent", "ack", item, "--serial", "2", "--outcome", "x")
    assert later.returncode == 1
    assert later.stderr == f"error: item {item} has no reply #2 (its latest is #1)\n"
    untaken = achilles(database_url, "agent", "ack", item, "--serial", "1", "--outcome", "x")
    assert untaken.returncode == 3
    assert "not_taken" in untaken.stdout
