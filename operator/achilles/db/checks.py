"""CHECK expressions and index predicates spelled from the domain's enums, once, for the
models and the migrations alike.

A value list (run states, reasons, item states, ...) is the enum's; these strings are
what the schema says about it. Migrations that have shipped must keep producing the
DDL they produced: `tests/unit/test_schema_text.py` pins the texts, so a new enum value
fails there and calls for a new migration instead of silently changing an old one.
"""

from __future__ import annotations

from collections.abc import Iterable

from achilles.domain import users
from achilles.domain.inbox import ItemState, ReplyChannel, ReplyKind
from achilles.domain.notifications import BUDGET_THRESHOLDS, DeliveryState, NotificationKind
from achilles.domain.run_trace import TRUNCATED_SEQ, StepKind, ToolStatus
from achilles.domain.runs import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    FailReason,
    RunState,
    RunTrigger,
    SkipReason,
    in_definition_order,
)


def sql_values(values: Iterable[str]) -> str:
    """`'a', 'b'`: a list of SQL string literals (the values are our own identifiers)."""
    return ", ".join(f"'{value}'" for value in values)


def in_check(column: str, values: Iterable[str]) -> str:
    """`column` holds one of `values`."""
    return f"{column} IN ({sql_values(values)})"


def not_in_check(column: str, values: Iterable[str]) -> str:
    return f"{column} NOT IN ({sql_values(values)})"


# --- agent_runs (0001_engine) ---

TERMINAL_RUN_STATES = sql_values(in_definition_order(TERMINAL_STATES))
RUN_TRIGGER_CHECK = in_check("trigger", RunTrigger)
RUN_STATE_CHECK = in_check("state", RunState)


def _reason_matches_state(fail_reasons: Iterable[str]) -> str:
    # A reason is a machine code that belongs to its state, and only there. IS NOT NULL:
    # `NULL IN (...)` is NULL, which a CHECK would let pass.
    return (
        f"(state = '{RunState.SKIPPED}' AND reason IS NOT NULL"
        f" AND {in_check('reason', SkipReason)})"
        f" OR (state = '{RunState.FAILED}' AND reason IS NOT NULL"
        f" AND {in_check('reason', fail_reasons)})"
        f" OR ({not_in_check('state', (RunState.SKIPPED, RunState.FAILED))} AND reason IS NULL)"
    )


# 0001_engine's failure reasons, as it shipped them; 0013_run_controls replaced the
# constraint with the enum's whole list (token_cap, cancelled).
RUN_REASON_MATCHES_STATE_CHECK_0001 = _reason_matches_state(
    (FailReason.ITERATION_CAP, FailReason.ERROR, FailReason.STALE)
)
RUN_REASON_MATCHES_STATE_CHECK = _reason_matches_state(FailReason)
RUN_SKIPPED_SPENDS_NOTHING_CHECK = f"state <> '{RunState.SKIPPED}' OR tokens_used = 0"
RUN_FINISHED_IFF_TERMINAL_CHECK = f"(state IN ({TERMINAL_RUN_STATES})) = (finished_at IS NOT NULL)"
# Only `running` and what it leads to normally carry a start time: a queued run can fail
# without ever starting.
RUN_STARTED_WHEN_RAN_CHECK = (
    f"{not_in_check('state', (RunState.RUNNING, RunState.SUCCEEDED))} OR started_at IS NOT NULL"
)
# The one-active-run lock (partial unique index) and the FIFO of waiting runs.
ACTIVE_RUN_PREDICATE = in_check("state", in_definition_order(ACTIVE_STATES))
QUEUED_RUN_PREDICATE = f"state = '{RunState.QUEUED}'"

# --- agent_inbox_items (0003_inbox) ---

ITEM_STATE_CHECK = in_check("state", ItemState)
REPLY_KIND_CHECK = in_check("reply_kind", ReplyKind)
REPLY_CHANNEL_CHECK = in_check("reply_channel", ReplyChannel)
# An unprocessed reply ("answered but not processed"): the partial index and the queries.
UNPROCESSED_REPLY_PREDICATE = "handled_at IS NOT NULL AND outcome IS NULL"

# --- users (0007_user_key_check) ---

# The key an Agent names its owner by (the CRD's pattern); PostgreSQL's `$`, like the
# API server's, matches only at the very end.
USER_KEY_CHECK = f"key ~ '{users.USER_KEY_PATTERN}' AND length(key) <= {users.USER_KEY_MAX_LENGTH}"

# --- agent_run_steps (0012_run_steps) ---

STEP_KIND_CHECK = in_check("kind", StepKind)
STEP_TOOL_STATUS_CHECK = in_check("status", ToolStatus)
# Steps are numbered from 1; the cap's marker is the last number a run may hold.
STEP_SEQ_CHECK = f"seq BETWEEN 1 AND {TRUNCATED_SEQ}"
STEP_TRUNCATED_LAST_CHECK = f"(kind = '{StepKind.TRUNCATED}') = (seq = {TRUNCATED_SEQ})"
_MODEL_FIELDS = ("model", "input_tokens", "output_tokens", "finish_reason")
_TOOL_FIELDS = ("tool", "status", "argument_bytes", "result_bytes")


def _all_null(columns: Iterable[str]) -> str:
    return " AND ".join(f"{column} IS NULL" for column in columns)


# A model call carries the model's columns, a tool call or inbox ask the tool's, the
# marker neither.
STEP_FIELDS_MATCH_KIND_CHECK = (
    f"(kind = '{StepKind.MODEL_CALL}' AND model IS NOT NULL AND {_all_null(_TOOL_FIELDS)})"
    f" OR ({in_check('kind', (StepKind.TOOL_CALL, StepKind.INBOX_ASK))}"
    f" AND tool IS NOT NULL AND status IS NOT NULL AND {_all_null(_MODEL_FIELDS)})"
    f" OR (kind = '{StepKind.TRUNCATED}' AND {_all_null((*_MODEL_FIELDS, *_TOOL_FIELDS))}"
    " AND error IS NULL)"
)
STEP_COUNTS_NON_NEGATIVE_CHECK = " AND ".join(
    f"coalesce({column}, 0) >= 0"
    for column in ("latency_ms", "input_tokens", "output_tokens", "argument_bytes", "result_bytes")
)

# --- agent_runs: what the run used (0012_run_steps) ---

RUN_USED_PROMPT_SHA256_CHECK = "used_prompt_sha256 IS NULL OR length(used_prompt_sha256) = 32"

# --- notification_outbox, budget_warnings (0014_notifications) ---

NOTIFICATION_KIND_CHECK = in_check("kind", NotificationKind)
DELIVERY_STATE_CHECK = in_check("state", DeliveryState)
PENDING_DELIVERY_PREDICATE = f"state = '{DeliveryState.PENDING}'"
DELIVERED_WHEN_DONE_CHECK = f"(state = '{DeliveryState.DELIVERED}') = (delivered_at IS NOT NULL)"
BUDGET_THRESHOLD_CHECK = f"threshold IN ({', '.join(map(str, BUDGET_THRESHOLDS))})"
