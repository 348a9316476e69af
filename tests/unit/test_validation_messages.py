"""describe_validation_error beyond schedules: nesting, lists, union tags, no input given."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from achilles.domain.schedule import Schedule
from achilles.domain.validation import describe_validation_error


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    tools: list[Annotated[str, Field(min_length=1)]] = []
    schedule: Schedule | None = None
    mode: Literal["a", "b"] = "a"


def _describe(data: object, *, with_input: bool = True) -> str:
    with pytest.raises(ValidationError) as caught:
        _Spec.model_validate(data)
    return describe_validation_error(caught.value, "spec", data if with_input else None)


def test_nested_union_tag_is_left_out_of_the_path() -> None:
    data = {"name": "x", "schedule": {"type": "interval", "everyHours": 0}}
    assert _describe(data) == "spec.schedule.everyHours: must be greater than or equal to 1 (got 0)"


def test_without_the_input_the_tag_stays_visible() -> None:
    data = {"name": "x", "schedule": {"type": "interval", "everyHours": 0}}
    assert _describe(data, with_input=False) == (
        "spec.schedule.interval.everyHours: must be greater than or equal to 1 (got 0)"
    )


def test_list_items_are_indexed_and_errors_joined_on_one_line() -> None:
    data = {"tools": ["inbox", ""], "mode": "c", "colour": "red"}
    assert _describe(data) == (
        "spec.name: required; "
        "spec.tools[1]: must have at least 1 character (got ''); "
        "spec.mode: must be 'a' or 'b' (got 'c'); "
        "spec.colour: unknown field"
    )


def test_long_inputs_are_cut() -> None:
    message = _describe({"name": 7})
    assert message == "spec.name: must be a valid string (got 7)"
    long_value = ["y" * 200]
    message = _describe({"name": long_value})
    assert message.startswith('spec.name: must be a valid string (got ["yyy')
    assert message.endswith("...)")
    assert len(message) < 120


def test_without_a_root_the_path_starts_at_the_field() -> None:
    with pytest.raises(ValidationError) as caught:
        _Spec.model_validate({})
    assert describe_validation_error(caught.value) == "name: required"
