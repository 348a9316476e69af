"""Prompt composition: the platform's layer above the owner's."""

from __future__ import annotations

from datetime import UTC, datetime

from achilles.domain.run_spec import RunSpec
from achilles.domain.runs import RunTrigger
from achilles.runner.prompt import DEFAULT_PLATFORM_PROMPT, compose_messages


def _spec(**overrides: object) -> RunSpec:
    fields: dict[str, object] = {
        "run_id": 7,
        "trigger": RunTrigger.SCHEDULED,
        "agent_id": 3,
        "agent_name": "Weekly digest",
        "prompt": "Summarise what changed in the deployment runbook.",
        "owner_user_id": 1,
        "owner_key": "alice",
        "owner_timezone": "Asia/Kathmandu",
        "model": None,
        "tool_implementations": (),
        "platform_prompt": "Follow the organisation's policies.",
        "max_iterations": 8,
        "run_timeout_seconds": 900,
    }
    fields.update(overrides)
    return RunSpec(**fields)  # type: ignore[arg-type]


NOW = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)


def test_platform_prompt_is_the_system_message_and_the_owners_the_user_message() -> None:
    system, user = compose_messages(_spec(), NOW)
    assert system["role"] == "system"
    assert system["content"].startswith("Follow the organisation's policies.\n\n")
    assert user == {
        "role": "user",
        "content": "Summarise what changed in the deployment runbook.",
    }


def test_run_facts_give_the_time_in_the_owners_zone() -> None:
    system, _ = compose_messages(_spec(), NOW)
    # 06:00 UTC is 11:45 in Kathmandu (UTC+05:45).
    assert "Monday 2026-11-30 11:45 (Asia/Kathmandu)" in system["content"]
    assert "Agent: Weekly digest. Owner: alice." in system["content"]
    assert "started by its schedule" in system["content"]
    manual, _ = compose_messages(_spec(trigger=RunTrigger.MANUAL), NOW)
    assert "started manually" in manual["content"]


def test_an_empty_platform_prompt_falls_back_to_the_engines_default() -> None:
    system, _ = compose_messages(_spec(platform_prompt="  \n"), NOW)
    assert system["content"].startswith(DEFAULT_PLATFORM_PROMPT)


def test_the_agent_description_is_never_sent() -> None:
    # RunSpec does not even carry it: descriptions are for people.
    assert "description" not in RunSpec.__dataclass_fields__


def test_toolset_notes_follow_the_owners_prompt_as_user_messages() -> None:
    messages = compose_messages(_spec(), NOW, ["people answered 1 question"])
    assert [m["role"] for m in messages] == ["system", "user", "user"]
    assert messages[2]["content"] == "people answered 1 question"
