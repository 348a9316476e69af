"""Turn a pydantic ValidationError into one line a person can act on.

pydantic's own rendering spans several lines, speaks of "Input should be ..." and puts
discriminated-union tags into the location (`interval.every_hours`). Admins reading a CLI
error or a Kubernetes Event need one line that names the field as they wrote it:
`schedule.time: must be HH:MM within 00:00-23:59 (got '24:00')`.

Convention for custom errors raised by our validators: use the error type `missing` for
"this field is required here" (the input is not shown), any other type for a bad value
(the offending input is appended as `(got ...)`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

# The "field" of an error about the input as a whole.
_NO_PATH = "(input)"
# A long input (a whole object given where a number belongs) is cut to keep one short line.
_MAX_SHOWN_INPUT = 60
# Error types whose `input` is not the offending value (or is obvious from the message).
_INPUT_NOT_SHOWN = frozenset({"missing", "extra_forbidden", "union_tag_not_found"})
# pydantic words most messages "<Subject> should ...": Input, String, List, Value...
_SUBJECT_SHOULD = re.compile(r"^[A-Z][a-z]+ should ")
# Error types meaning "an object was expected here", worded in pydantic's Python terms.
_NOT_AN_OBJECT = frozenset({"model_attributes_type", "model_type", "dict_type"})


def describe_validation_error(
    exc: ValidationError, root: str = "", data: object | None = None
) -> str:
    """One line naming every failing field: `root.field: problem (got value); ...`.

    `data` is the input that was validated; when given, discriminated-union tags that
    pydantic inserts into error locations are recognised (a location step that is not a
    key of the input object but one of its values) and left out of the field path.
    """
    return "; ".join(_describe_one(error, root, data) for error in exc.errors())


def describe_document_error(exc: ValidationError, source: str, data: object) -> str:
    """One line for a document read from `source` (a file): `FILE: rules[0].reply: problem`,
    or `FILE: problem` when the document as a whole is wrong (not an object at all)."""
    errors = exc.errors()
    problems = [
        _describe_one(error, "", data).removeprefix(f"{_NO_PATH}: ")
        for error in errors
        if not _is_echo_of_an_item_error(error, errors)
    ]
    return f"{source}: {'; '.join(problems)}"


def _is_echo_of_an_item_error(error: ErrorDetails, errors: Sequence[ErrorDetails]) -> bool:
    """pydantic drops a sequence's invalid items and then also reports the sequence as
    too short; the item's own error is the one that says what to fix."""
    loc = tuple(error["loc"])
    return error["type"] == "too_short" and any(
        len(other["loc"]) > len(loc) and tuple(other["loc"][: len(loc)]) == loc for other in errors
    )


def _describe_one(error: ErrorDetails, root: str, data: object | None) -> str:
    kind = error["type"]
    loc: list[int | str] = list(_without_union_tags(error["loc"], data))
    context: Mapping[str, Any] = error.get("ctx") or {}
    shown_input: object = error["input"]
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        # pydantic reports these on the object; the culprit is the discriminator field.
        loc.append(str(context.get("discriminator", "type")).strip("'\""))
    if kind == "union_tag_invalid":
        problem = f"must be one of {context.get('expected_tags', '')}"
        shown_input = context.get("tag")
    elif kind == "union_tag_not_found":
        problem = "required"
    elif kind == "extra_forbidden":
        problem = "unknown field"
    elif kind in _NOT_AN_OBJECT:
        problem = "must be an object"
    elif kind == "missing":
        problem = "required" if error["msg"] == "Field required" else error["msg"]
    else:
        problem = _reword(error["msg"])
    # An object as input means the error is about the object as a whole: don't echo it.
    if kind not in _INPUT_NOT_SHOWN and not isinstance(shown_input, Mapping):
        problem += f" (got {_show(shown_input)})"
    return f"{_join_path(root, loc)}: {problem}"


def _without_union_tags(loc: Sequence[int | str], data: object | None) -> list[int | str]:
    """Drop the tag pydantic inserts after a discriminated union's location."""
    if data is None:
        return list(loc)
    path: list[int | str] = []
    node: object = data
    for step in loc:
        if isinstance(node, Mapping) and isinstance(step, str) and step not in node:
            if step in {value for value in node.values() if isinstance(value, str)}:
                continue  # the tag: same object, keep walking
            node = None
        elif isinstance(node, Mapping):
            node = node.get(step)
        elif (
            isinstance(node, Sequence) and isinstance(step, int) and -len(node) <= step < len(node)
        ):
            node = node[step]
        else:
            node = None
        path.append(step)
    return path


def _reword(message: str) -> str:
    """pydantic's "Input/String/List should be ..." becomes "must be ..."."""
    message = _SUBJECT_SHOULD.sub("must ", message, count=1)
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    return message


def _join_path(root: str, loc: Sequence[int | str]) -> str:
    path = root
    for step in loc:
        if isinstance(step, int):
            path += f"[{step}]"
        else:
            path += f".{step}" if path else step
    return path or _NO_PATH


def _show(value: object) -> str:
    if isinstance(value, str):
        shown = repr(value)
    else:
        try:
            shown = json.dumps(value, default=repr)
        except (TypeError, ValueError):
            shown = repr(value)
    if len(shown) > _MAX_SHOWN_INPUT:
        shown = shown[: _MAX_SHOWN_INPUT - 3] + "..."
    return shown
