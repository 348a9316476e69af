"""CEL validation rules declared next to the pydantic models they belong to.

The API server can only check what the CRD schema says, and some of what our pydantic
models check (a cross-field rule, immutability after create, a singleton's name) has no
OpenAPI keyword. Those rules are written once, here in CEL, on the model or field they
guard; the CRD generator copies them into `x-kubernetes-validations`, and a cluster test
proves pydantic and the API server accept and reject the same inputs.

Messages name the field a person has to fix. A rule declared on a reusable model does
not know where it will be embedded, so its message may say `{path}`; the generator puts
the field's path there (`spec.schedule`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import JsonValue

# Placeholder for the JSON path of the object a rule is declared on, e.g. "spec.schedule".
PATH = "{path}"

VALIDATIONS_KEY = "x-kubernetes-validations"


class Reason(StrEnum):
    """How the API server classifies a failed rule (apiextensions `reason`)."""

    INVALID = "FieldValueInvalid"
    REQUIRED = "FieldValueRequired"
    FORBIDDEN = "FieldValueForbidden"


@dataclass(frozen=True)
class CelRule:
    """One `x-kubernetes-validations` entry.

    `field_path` (e.g. ".weekday") points the API server's error at a child field, so
    the error reads `spec.schedule.weekday: Forbidden: ...` rather than blaming the
    whole object. A rule that mentions `oldSelf` is a transition rule: it only runs on
    updates, when the old object had the field too.
    """

    rule: str
    message: str
    field_path: str | None = None
    reason: Reason = Reason.INVALID
    # A CEL expression for the message when the value itself belongs in it (the API server
    # falls back to `message` if it fails); it may say `{path}` too.
    message_expression: str | None = None

    @property
    def is_transition_rule(self) -> bool:
        return "oldSelf" in self.rule

    def as_json(self) -> dict[str, JsonValue]:
        """The schema entry; the message may still hold the `{path}` placeholder."""
        entry: dict[str, JsonValue] = {"rule": self.rule, "message": self.message}
        if self.message_expression is not None:
            entry["messageExpression"] = self.message_expression
        if self.field_path is not None:
            entry["fieldPath"] = self.field_path
        if self.reason is not Reason.INVALID:
            entry["reason"] = self.reason.value
        return entry


def cel_string(text: str) -> str:
    """A CEL string literal (our own identifiers: no quotes or backslashes inside)."""
    if "'" in text or "\\" in text:
        raise ValueError(f"not a plain identifier: {text!r}")
    return f"'{text}'"


def cel_rules(*rules: CelRule) -> dict[str, JsonValue]:
    """`json_schema_extra` for a field or model: carries the rules into its JSON schema."""
    return {VALIDATIONS_KEY: [rule.as_json() for rule in rules]}


def render_message(entry: dict[str, Any], path: str) -> dict[str, Any]:
    """The entry with `{path}` in its message replaced by the field's JSON path."""
    rendered = {**entry, "message": str(entry.get("message", "")).replace(PATH, path)}
    if "messageExpression" in entry:
        rendered["messageExpression"] = str(entry["messageExpression"]).replace(PATH, path)
    return rendered
