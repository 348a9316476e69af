"""Prompt composition: the platform's layer above the owner's (seed 000, `agents.prompt`).

The platform prompt (organisation policy, from `platform_settings`) is the
system message, followed by facts about this run; the owner's prompt is the
user message. Models weigh system instructions above user ones, which is the
layering the seed asks for: the owner's layer is composed *under* the
platform's and cannot override it. The agent's `description` is for people and
is never sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from zoneinfo import ZoneInfo

from achilles.domain.run_spec import RunSpec
from achilles.domain.run_trace import prompt_digest
from achilles.llm.chat import Message

# Used when the organisation has not written a platform prompt of its own.
DEFAULT_PLATFORM_PROMPT = (
    "You are a personal agent working for one employee of the organisation, on their "
    "behalf and with exactly their access rights. Use the tools to look things up in the "
    "organisation's Knowledge Store rather than guessing, and name the documents you "
    "relied on. When you are done, reply with your final answer for your owner and call "
    "no more tools."
)


def run_facts(spec: RunSpec, now: datetime) -> str:
    zone = ZoneInfo(spec.owner_timezone)
    local = now.astimezone(zone)
    return (
        f"Agent: {spec.agent_name}. Owner: {spec.owner_key}. "
        f"This run was started {'manually' if spec.trigger == 'manual' else 'by its schedule'}. "
        f"Current time for your owner: {local:%A %Y-%m-%d %H:%M} ({spec.owner_timezone})."
    )


def platform_layer(spec: RunSpec) -> str:
    """The platform's layer of the run's prompt: the organisation's, else the default."""
    return spec.platform_prompt.strip() or DEFAULT_PLATFORM_PROMPT


def composed_prompt_digest(spec: RunSpec) -> bytes:
    """SHA-256 of the composed prompt's layers (what `agent_runs.used_prompt_sha256`
    keeps): the platform's and the owner's, not the run facts or start notes."""
    return prompt_digest(platform_layer(spec), spec.prompt)


def compose_messages(spec: RunSpec, now: datetime, notes: Sequence[str] = ()) -> list[Message]:
    """The conversation a run starts from; `notes` (from toolsets, e.g. inbox replies
    people gave since the last run) follow the owner's prompt as user messages."""
    platform = platform_layer(spec)
    return [
        {"role": "system", "content": f"{platform}\n\n{run_facts(spec, now)}"},
        {"role": "user", "content": spec.prompt},
        *({"role": "user", "content": note} for note in notes),
    ]
