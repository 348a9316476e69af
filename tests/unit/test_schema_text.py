"""The CHECK texts and index predicates that shipped migrations emit, pinned.

`achilles.db.checks` spells them from the domain's enums for the models and the
migrations alike. A migration that has run somewhere must keep emitting the same DDL,
so when an enum grows this test fails: write a new migration that replaces the
constraint, and pin the new text there, instead of editing this history.
"""

from __future__ import annotations

import pytest

from achilles.db import checks

SHIPPED = {
    # 0001_engine
    "RUN_TRIGGER_CHECK": "trigger IN ('manual', 'scheduled')",
    "RUN_STATE_CHECK": "state IN ('queued', 'running', 'succeeded', 'failed', 'skipped')",
    "RUN_REASON_MATCHES_STATE_CHECK_0001": (
        "(state = 'skipped' AND reason IS NOT NULL"
        " AND reason IN ('budget_exceeded', 'already_running'))"
        " OR (state = 'failed' AND reason IS NOT NULL"
        " AND reason IN ('iteration_cap', 'error', 'stale'))"
        " OR (state NOT IN ('skipped', 'failed') AND reason IS NULL)"
    ),
    "RUN_SKIPPED_SPENDS_NOTHING_CHECK": "state <> 'skipped' OR tokens_used = 0",
    "RUN_FINISHED_IFF_TERMINAL_CHECK": (
        "(state IN ('succeeded', 'failed', 'skipped')) = (finished_at IS NOT NULL)"
    ),
    "RUN_STARTED_WHEN_RAN_CHECK": "state NOT IN ('running', 'succeeded') OR started_at IS NOT NULL",
    "ACTIVE_RUN_PREDICATE": "state IN ('queued', 'running')",
    "QUEUED_RUN_PREDICATE": "state = 'queued'",
    "TERMINAL_RUN_STATES": "'succeeded', 'failed', 'skipped'",
    # 0003_inbox
    "ITEM_STATE_CHECK": "state IN ('tracked', 'partial', 'missing', 'na', 'done', 'blocked')",
    "REPLY_KIND_CHECK": "reply_kind IN ('answer', 'clarify')",
    "REPLY_CHANNEL_CHECK": "reply_channel IN ('inbox', 'chat')",
    "UNPROCESSED_REPLY_PREDICATE": "handled_at IS NOT NULL AND outcome IS NULL",
    # 0007_user_key_check
    "USER_KEY_CHECK": "key ~ '^[A-Za-z0-9][A-Za-z0-9._@+-]*$' AND length(key) <= 253",
    # 0012_run_steps
    "STEP_KIND_CHECK": "kind IN ('model_call', 'tool_call', 'inbox_ask', 'truncated')",
    "STEP_TOOL_STATUS_CHECK": "status IN ('ok', 'error')",
    "STEP_SEQ_CHECK": "seq BETWEEN 1 AND 201",
    "STEP_TRUNCATED_LAST_CHECK": "(kind = 'truncated') = (seq = 201)",
    "STEP_FIELDS_MATCH_KIND_CHECK": (
        "(kind = 'model_call' AND model IS NOT NULL AND tool IS NULL AND status IS NULL"
        " AND argument_bytes IS NULL AND result_bytes IS NULL)"
        " OR (kind IN ('tool_call', 'inbox_ask') AND tool IS NOT NULL AND status IS NOT NULL"
        " AND model IS NULL AND input_tokens IS NULL AND output_tokens IS NULL"
        " AND finish_reason IS NULL)"
        " OR (kind = 'truncated' AND model IS NULL AND input_tokens IS NULL"
        " AND output_tokens IS NULL AND finish_reason IS NULL AND tool IS NULL"
        " AND status IS NULL AND argument_bytes IS NULL AND result_bytes IS NULL"
        " AND error IS NULL)"
    ),
    "STEP_COUNTS_NON_NEGATIVE_CHECK": (
        "coalesce(latency_ms, 0) >= 0 AND coalesce(input_tokens, 0) >= 0"
        " AND coalesce(output_tokens, 0) >= 0 AND coalesce(argument_bytes, 0) >= 0"
        " AND coalesce(result_bytes, 0) >= 0"
    ),
    "RUN_USED_PROMPT_SHA256_CHECK": (
        "used_prompt_sha256 IS NULL OR length(used_prompt_sha256) = 32"
    ),
    # 0013_run_controls
    "RUN_REASON_MATCHES_STATE_CHECK": (
        "(state = 'skipped' AND reason IS NOT NULL"
        " AND reason IN ('budget_exceeded', 'already_running'))"
        " OR (state = 'failed' AND reason IS NOT NULL"
        " AND reason IN ('iteration_cap', 'error', 'stale', 'token_cap', 'cancelled'))"
        " OR (state NOT IN ('skipped', 'failed') AND reason IS NULL)"
    ),
    # 0014_notifications
    "NOTIFICATION_KIND_CHECK": (
        "kind IN ('inbox.item_blocked', 'run.failed', 'run.skipped',"
        " 'budget.threshold_crossed', 'agent.suspended')"
    ),
    "DELIVERY_STATE_CHECK": "state IN ('pending', 'delivered', 'dead')",
    "PENDING_DELIVERY_PREDICATE": "state = 'pending'",
    "DELIVERED_WHEN_DONE_CHECK": "(state = 'delivered') = (delivered_at IS NOT NULL)",
    "BUDGET_THRESHOLD_CHECK": "threshold IN (80, 95)",
}


@pytest.mark.parametrize(("name", "text"), sorted(SHIPPED.items()))
def test_shipped_schema_text_is_unchanged(name: str, text: str) -> None:
    assert getattr(checks, name) == text, (
        f"{name} changed: shipped migrations must keep their DDL; add a migration instead"
    )


def test_every_schema_text_is_pinned() -> None:
    spelled = {
        name for name, value in vars(checks).items() if name.isupper() and isinstance(value, str)
    }
    assert spelled == set(SHIPPED)
