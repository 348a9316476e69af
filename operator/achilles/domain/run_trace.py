"""A run's trace in the journal (issue 21): its steps, and what it used.

Steps (`agent_run_steps`, migration 0012): each model call, tool call and inbox ask of a
run, numbered from 1 as they happen, with their times, latency and sizes, never the
owner's documents, prompts or tool results themselves. A run keeps at most
`MAX_STEPS_PER_RUN`; the next one becomes a single `truncated` marker (`TRUNCATED_SEQ`)
and every later step is dropped, so a looping agent cannot grow the journal without end.

What the run used (columns of `agent_runs`): its model's name, the endpoint's identity
(the base URL's host and the provider's model id, never a key or the URL's user info), a
SHA-256 digest of the composed prompt (the platform's layer and the owner's), and the
names of the tools offered to the model at start.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from urllib.parse import urlsplit

MAX_STEPS_PER_RUN = 200
TRUNCATED_SEQ = MAX_STEPS_PER_RUN + 1
# A step's error is a diagnosis, not a transcript: the first characters are enough.
MAX_STEP_ERROR_CHARS = 500


class StepKind(StrEnum):
    MODEL_CALL = "model_call"
    TOOL_CALL = "tool_call"
    INBOX_ASK = "inbox_ask"  # a tool call that asks people (the inbox toolset's ask)
    TRUNCATED = "truncated"  # the run's steps past the cap were not kept


class ToolStatus(StrEnum):
    OK = "ok"
    ERROR = "error"  # the model got an error result (bad arguments, a refusal, a crash)


@dataclass(frozen=True)
class Step:
    """One step as the runner saw it; its number is given when it is recorded."""

    kind: StepKind
    started_at: datetime
    ended_at: datetime
    latency_ms: float
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    tool: str | None = None
    status: ToolStatus | None = None
    argument_bytes: int | None = None
    result_bytes: int | None = None
    error: str | None = None
    # SHA-256 of an MCP call's canonical arguments (issue 38): what the journal keeps of
    # them besides their size.
    argument_sha256: bytes | None = None
    # For the run's trace (OpenTelemetry), not the journal: the model's id of a tool
    # call, and a low-cardinality class of a step's error (an exception's class name).
    call_id: str | None = None
    error_type: str | None = None


@dataclass(frozen=True)
class NumberedStep:
    seq: int
    step: Step


def truncated_marker(at: datetime) -> Step:
    return Step(kind=StepKind.TRUNCATED, started_at=at, ended_at=at, latency_ms=0.0)


class StepNumbering:
    """Numbers a run's steps and applies the cap: steps 1..MAX_STEPS_PER_RUN as they
    come, then one `truncated` marker, then nothing (None). Not thread-safe: its owner
    serialises calls."""

    def __init__(self, cap: int = MAX_STEPS_PER_RUN) -> None:
        self._cap = cap
        self._next = 1

    def number(self, step: Step) -> NumberedStep | None:
        seq = self._next
        if seq > self._cap + 1:
            return None
        self._next += 1
        if seq == self._cap + 1:
            return NumberedStep(seq, truncated_marker(step.started_at))
        return NumberedStep(seq, step)


def clip_step_error(error: str | None) -> str | None:
    if error is None or len(error) <= MAX_STEP_ERROR_CHARS:
        return error
    return error[: MAX_STEP_ERROR_CHARS - 3] + "..."


@dataclass(frozen=True)
class RunUsed:
    """What a run used, recorded when it starts."""

    model: str  # the AgentModel's name
    endpoint_host: str  # the base URL's host[:port]
    provider_model: str  # the model id sent to the endpoint
    prompt_sha256: bytes  # of the composed prompt: `prompt_digest`
    tools: tuple[str, ...]  # the tool names offered to the model, in the order offered

    @property
    def prompt_digest_hex(self) -> str:
        return self.prompt_sha256.hex()


def endpoint_host(base_url: str) -> str:
    """The endpoint's identity without secrets: host[:port] of the base URL (no scheme,
    user info, path or query)."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{host}:{port}" if port is not None else host


def prompt_digest(platform_layer: str, owner_layer: str) -> bytes:
    """SHA-256 of the composed prompt's two layers, as a JSON pair (so no choice of
    texts can make two different pairs digest alike). The run facts (the owner's local
    time) and the notes toolsets add at start change from run to run by design and are
    not part of it."""
    composed = json.dumps([platform_layer, owner_layer], ensure_ascii=False)
    return hashlib.sha256(composed.encode("utf-8")).digest()
