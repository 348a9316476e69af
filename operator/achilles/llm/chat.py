"""Chat Completions with tool calls through the `openai` client: the only module that imports it.

The runner sees a small typed surface (`ChatModel.complete` -> `ChatReply`);
every API failure, after the client's own retries (connection errors, 408, 409,
429 and 5xx, honouring `Retry-After`), becomes `ModelCallFailed` carrying the
detail the journal's `error` column should show.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import openai
from openai.types.chat import ChatCompletion

from achilles.errors import ModelCallFailed

log = logging.getLogger(__name__)

# The most tokens one call may report, in each of prompt, completion and total. Larger
# than any model's context window (the prompt and the completion both fit in it), so a
# larger count is a malformed reply, not a big call. Added as is, one absurd `usage`
# (found by `achilles chaos bad-input`: 2,000,000,000,000,000 tokens) would exhaust its
# owner's weekly budget for good.
MAX_TOKENS_PER_CALL = 10_000_000

# OpenAI-format messages as plain JSON objects (role, content, tool_calls, tool_call_id).
Message = dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    call_id: str
    name: str
    arguments: str  # raw JSON text as the model produced it; validated by the tool


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


@dataclass(frozen=True)
class ChatReply:
    content: str | None
    tool_calls: tuple[ToolCall, ...]
    usage: Usage | None  # None when the server did not report usage
    finish_reason: str
    model: str | None = None  # the model the server says answered (may name a version)

    def as_message(self) -> Message:
        """The assistant message to append to the conversation."""
        message: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in self.tool_calls
            ]
        return message


class ChatModel(Protocol):
    def complete(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]], *, timeout: float
    ) -> ChatReply: ...


class OpenAIChatModel:
    """An OpenAI-compatible Chat Completions endpoint (`base_url`, provider model id)."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        timeout: float,
        max_retries: int,
    ) -> None:
        self._model = model
        self._base_url = base_url
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
        )
        self._max_retries = max_retries

    def complete(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]], *, timeout: float
    ) -> ChatReply:
        try:
            completion = self._client.chat.completions.create(
                model=self._model,
                messages=cast(Any, list(messages)),
                tools=cast(Any, list(tools)) if tools else openai.omit,
                timeout=timeout,
            )
        except openai.APIStatusError as exc:
            raise ModelCallFailed(
                f"model API returned HTTP {exc.status_code} from {self._base_url}"
                f"{self._after_retries()}: {exc.message}"
            ) from exc
        except openai.APITimeoutError as exc:
            raise ModelCallFailed(
                f"model API timed out after {timeout:g} s at {self._base_url}"
                f"{self._after_retries()}"
            ) from exc
        except openai.APIConnectionError as exc:
            raise ModelCallFailed(
                f"model API unreachable at {self._base_url}{self._after_retries()}: "
                f"{exc.__cause__ or exc}"
            ) from exc
        except openai.OpenAIError as exc:
            raise ModelCallFailed(f"model API error from {self._base_url}: {exc}") from exc
        return _to_reply(completion)

    def close(self) -> None:
        self._client.close()

    def _after_retries(self) -> str:
        return f" (after {self._max_retries} retries)" if self._max_retries else ""


def _to_reply(completion: ChatCompletion) -> ChatReply:
    if not completion.choices:
        raise ModelCallFailed("model API returned no choices")
    choice = completion.choices[0]
    calls = []
    for call in choice.message.tool_calls or ():
        if call.type != "function":
            raise ModelCallFailed(f"model returned an unsupported tool call type {call.type!r}")
        calls.append(
            ToolCall(call_id=call.id, name=call.function.name, arguments=call.function.arguments)
        )
    usage = None
    if completion.usage is not None:
        usage = Usage(
            prompt_tokens=completion.usage.prompt_tokens,
            completion_tokens=completion.usage.completion_tokens,
            total_tokens=completion.usage.total_tokens,
        )
        _check_usage(usage)
    else:
        log.warning("model API reported no usage; this call counts 0 tokens")
    return ChatReply(
        content=choice.message.content,
        tool_calls=tuple(calls),
        usage=usage,
        finish_reason=choice.finish_reason,
        model=completion.model or None,
    )


def _check_usage(usage: Usage) -> None:
    """A reply whose token counts cannot be true is malformed: it fails the call."""
    counts = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }
    for name, count in counts.items():
        if count < 0 or count > MAX_TOKENS_PER_CALL:
            raise ModelCallFailed(
                f"model API returned an implausible usage: {name} = {count}"
                f" (a call reports 0 to {MAX_TOKENS_PER_CALL:,} tokens); nothing was counted"
            )
