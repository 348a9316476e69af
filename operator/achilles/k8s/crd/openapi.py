"""Pydantic JSON schema -> structural OpenAPI v3 schema for apiextensions.k8s.io/v1.

Kubernetes accepts only "structural" schemas: every node has a type, no `$ref`, no
`anyOf`/`oneOf` that changes the shape, no `additionalProperties: false` next to
`properties`. Pydantic emits all of those. This module rewrites pydantic's schema into
the structural form without losing a constraint, and refuses (CrdGenerationError, with
the field's path) whatever it cannot carry over faithfully:

- `$ref` is inlined; `X | None` becomes `X`: a null field is dropped by the API server
  before validation (non-nullable, no default), which is what pydantic does too (our
  base models treat null as absent), so nothing here is declared nullable.
- A discriminated union becomes one object with every variant's fields optional plus
  CEL rules that require exactly the fields of the chosen variant, each message naming
  the field (`spec.schedule.everyHours is required when type is interval`).
- Every string gets a `maxLength` and every list a `maxItems` (sane limits, and the CEL
  cost budget needs them). A string bounded only by an anchored pattern gets the
  pattern's longest match as its `maxLength`.
- Patterns must mean the same to pydantic (Rust regex) and the API server (Go RE2):
  shorthand classes such as `\\d` and `\\s` are Unicode-aware in one and ASCII in the
  other, so they are refused.
- Messages of declared CEL rules get `{path}` replaced by the field's JSON path.
"""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from achilles.errors import CrdGenerationError
from achilles.k8s.resources.cel import VALIDATIONS_KEY, Reason, render_message

Schema = dict[str, Any]

# Keys copied as they are (after their values are converted where needed).
_PLAIN_KEYS = frozenset(
    {
        "type",
        "description",
        "enum",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minItems",
        "maxItems",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-preserve-unknown-fields",
    }
)
# Keys pydantic emits that carry nothing the API server uses.
_DROPPED_KEYS = frozenset({"title", "examples", "$defs"})
_SCALAR_TYPES = {"string", "integer", "number", "boolean"}
# Shorthand classes whose meaning differs between Rust's regex (Unicode) and RE2 (ASCII).
_DIALECT_SENSITIVE = re.compile(r"\\[dDsSwWbB]")
_UNBOUNDED_WIDTH = 1 << 32


def structural_schema(model: type[BaseModel], overrides: Mapping[str, Schema]) -> Schema:
    """The structural schema of `model`; `overrides` replaces top-level properties whole.

    Overrides are for what the API server owns (`metadata`, `apiVersion`, `kind`).
    """
    raw = model.model_json_schema(by_alias=True, mode="validation")
    definitions = raw.pop("$defs", {})
    missing = set(overrides) - set(raw.get("properties", {}))
    if missing:
        raise CrdGenerationError(f"{model.__name__} has no field(s) {sorted(missing)} to override")
    return _Converter(definitions, overrides).convert(raw, path="")


class _Converter:
    def __init__(self, definitions: Mapping[str, Schema], overrides: Mapping[str, Schema]) -> None:
        self._definitions = definitions
        self._overrides = overrides
        self._resolving: list[str] = []
        self._converting: list[str] = []

    def convert(self, node: Schema, path: str) -> Schema:
        if path in self._overrides:
            return copy.deepcopy(dict(self._overrides[path]))
        if "$ref" in node:
            # Track the model while its whole subtree converts: a model that contains
            # itself has no finite structural schema.
            name = str(node["$ref"]).rsplit("/", 1)[-1]
            if name in self._converting:
                raise CrdGenerationError(
                    f"{_shown(path)}: recursive model {name} has no CRD schema"
                )
            self._converting.append(name)
            try:
                return self.convert(self._resolve(node, path), path)
            finally:
                self._converting.pop()
        node = self._without_null(node, path)
        if "oneOf" in node:
            return self._discriminated_union(node, path)
        if "const" in node:
            node = {**{k: v for k, v in node.items() if k != "const"}, "enum": [node["const"]]}
        kind = node.get("type")
        if kind == "object":
            result = self._object(node, path)
        elif kind == "array":
            result = self._array(node, path)
        elif kind in _SCALAR_TYPES:
            result = self._scalar(node, path)
        else:
            raise CrdGenerationError(f"{_shown(path)}: no structural type in {sorted(node)}")
        return _ordered(result)

    # --- $ref and `X | None` ---

    def _resolve(self, node: Schema, path: str) -> Schema:
        """Inline a `$ref`; the referring node's own keys (description, rules) win or add."""
        if "$ref" not in node:
            return node
        name = str(node["$ref"]).rsplit("/", 1)[-1]
        if name in self._resolving:
            raise CrdGenerationError(f"{_shown(path)}: recursive model {name} has no CRD schema")
        if name not in self._definitions:
            raise CrdGenerationError(f"{_shown(path)}: unknown schema reference {node['$ref']}")
        target = copy.deepcopy(self._definitions[name])
        self._resolving.append(name)
        try:
            target = self._resolve(target, path)
        finally:
            self._resolving.pop()
        return _merge(target, {k: v for k, v in node.items() if k != "$ref"})

    def _without_null(self, node: Schema, path: str) -> Schema:
        if "anyOf" not in node:
            return node
        members = [
            self._resolve(member, path) for member in node["anyOf"] if member != {"type": "null"}
        ]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if rest.get("default", "absent") is None:
            del rest["default"]
        if len(members) == 1:
            return _merge(members[0], rest)
        if all(member.get("type") == "string" and "enum" in member for member in members):
            # StrEnum | StrEnum: one enum of all their values.
            values = [value for member in members for value in member["enum"]]
            return _merge({"type": "string", "enum": values}, rest)
        raise CrdGenerationError(
            f"{_shown(path)}: only `X | None`, unions of string enums and discriminated "
            "unions are supported"
        )

    # --- shapes ---

    def _object(self, node: Schema, path: str) -> Schema:
        result = self._common(node, path, skip={"properties", "required", "additionalProperties"})
        properties: Mapping[str, Schema] = node.get("properties", {})
        additional = node.get("additionalProperties", False)
        if properties:
            result["properties"] = {
                name: self.convert(child, _child(path, name)) for name, child in properties.items()
            }
            required = [name for name in node.get("required", []) if name in properties]
            if required:
                result["required"] = required
        elif additional is not False and not result.get("x-kubernetes-preserve-unknown-fields"):
            raise CrdGenerationError(
                f"{_shown(path)}: a free-form mapping needs x-kubernetes-preserve-unknown-fields"
            )
        return result

    def _array(self, node: Schema, path: str) -> Schema:
        if "maxItems" not in node:
            raise CrdGenerationError(f"{_shown(path)}: a list needs a max_length (maxItems)")
        if node.get("uniqueItems"):
            raise CrdGenerationError(
                f"{_shown(path)}: use x-kubernetes-list-type: set instead of uniqueItems"
            )
        result = self._common(node, path, skip={"items", "uniqueItems"})
        result["items"] = self.convert(node["items"], f"{path}[*]")
        return result

    def _scalar(self, node: Schema, path: str) -> Schema:
        if "exclusiveMinimum" in node or "exclusiveMaximum" in node:
            # JSON Schema 2020-12 and OpenAPI 3.0 spell exclusive bounds differently.
            raise CrdGenerationError(f"{_shown(path)}: use ge/le bounds, not gt/lt")
        result = self._common(node, path, skip=set())
        if result["type"] == "string":
            _check_string(result, path)
        return result

    def _common(self, node: Schema, path: str, skip: set[str]) -> Schema:
        result: Schema = {}
        for key, value in node.items():
            if key in skip or key in _DROPPED_KEYS or key == VALIDATIONS_KEY:
                continue
            if key == "default":
                if value is not None and not isinstance(value, list | dict):
                    result["default"] = value
            elif key in _PLAIN_KEYS:
                result[key] = copy.deepcopy(value)
            else:
                raise CrdGenerationError(f"{_shown(path)}: schema keyword {key!r} is not supported")
        rules = [render_message(rule, path) for rule in node.get(VALIDATIONS_KEY, [])]
        if rules:
            result[VALIDATIONS_KEY] = rules
        return result

    # --- discriminated unions ---

    def _discriminated_union(self, node: Schema, path: str) -> Schema:
        discriminator = node.get("discriminator", {}).get("propertyName")
        if not discriminator:
            raise CrdGenerationError(f"{_shown(path)}: a union needs a discriminator field")
        variants = [self._resolve(variant, path) for variant in node["oneOf"]]
        tags: list[str] = []
        fields: dict[str, Schema] = {}
        layouts: list[tuple[str, set[str], set[str]]] = []  # tag, fields, required fields
        for variant in variants:
            own = dict(variant.get("properties", {}))
            tag = _tag_of(own.pop(discriminator, {}), path, discriminator)
            tags.append(tag)
            required = set(variant.get("required", [])) - {discriminator}
            layouts.append((tag, set(own), required))
            for name, child in own.items():
                if child.get("default") is not None:
                    raise CrdGenerationError(
                        f"{_shown(_child(path, name))}: a union variant's field cannot have a "
                        "default (it would apply to the other variants too)"
                    )
                converted = self.convert(child, _child(path, name))
                if fields.setdefault(name, converted) != converted:
                    raise CrdGenerationError(
                        f"{_shown(_child(path, name))}: variants disagree on this field's schema"
                    )
        outer = {k: v for k, v in node.items() if k not in ("oneOf", "discriminator")}
        result = self._common({**outer, "type": "object"}, path, skip=set())
        result["properties"] = {
            discriminator: {
                "type": "string",
                "enum": tags,
                "description": f"Which kind of {path.rsplit('.', 1)[-1] or 'value'} this is.",
            },
            **fields,
        }
        result["required"] = [discriminator]
        exact = _exact_fields_rules(path, discriminator, layouts, list(fields))
        result[VALIDATIONS_KEY] = exact + result.get(VALIDATIONS_KEY, [])
        return _ordered(result)


def _exact_fields_rules(
    path: str, discriminator: str, layouts: list[tuple[str, set[str], set[str]]], order: list[str]
) -> list[Schema]:
    """CEL rules: each variant requires its required fields and forbids the others'."""
    rules: list[Schema] = []
    for tag, own, required in layouts:
        chosen = f"!has(self.{discriminator}) || self.{discriminator} != '{tag}' || "
        for name in order:
            if name in required:
                rule, verb, reason = f"{chosen}has(self.{name})", "is required", Reason.REQUIRED
            elif name not in own:
                rule, verb, reason = (
                    f"{chosen}!has(self.{name})",
                    "is not allowed",
                    Reason.FORBIDDEN,
                )
            else:
                continue
            rules.append(
                {
                    "rule": rule,
                    "message": f"{_child(path, name)} {verb} when {discriminator} is {tag}",
                    "fieldPath": f".{name}",
                    "reason": reason.value,
                }
            )
    return rules


def _tag_of(schema: Schema, path: str, discriminator: str) -> str:
    if "const" in schema:
        return str(schema["const"])
    if len(schema.get("enum", [])) == 1:
        return str(schema["enum"][0])
    raise CrdGenerationError(f"{_shown(path)}: each variant needs a literal {discriminator}")


def _check_string(schema: Schema, path: str) -> None:
    pattern = schema.get("pattern")
    if pattern is not None and _DIALECT_SENSITIVE.search(pattern):
        raise CrdGenerationError(
            f"{_shown(path)}: pattern {pattern!r} uses a shorthand class (\\d, \\s, \\w, \\b) "
            "that pydantic and the API server read differently; spell the class out"
        )
    if "maxLength" in schema or "enum" in schema or schema.get("format") == "date-time":
        return
    bound = _longest_match(pattern) if pattern is not None else None
    if bound is None:
        raise CrdGenerationError(f"{_shown(path)}: a string needs a max_length (maxLength)")
    schema["maxLength"] = bound


def _longest_match(pattern: str) -> int | None:
    """Length of the longest string `pattern` can match, if it is bounded and anchored."""
    if not (pattern.startswith("^") and pattern.endswith("$")):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import sre_parse  # the stdlib regex parser knows match widths

    _, longest = sre_parse.parse(pattern).getwidth()
    return longest if longest < _UNBOUNDED_WIDTH else None


# Reading order of the generated YAML: what it is, its bounds, then what it contains.
_KEY_ORDER = (
    "type",
    "description",
    "enum",
    "default",
    "format",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-preserve-unknown-fields",
    "properties",
    "required",
    "items",
    VALIDATIONS_KEY,
)
_RULE_KEY_ORDER = ("rule", "message", "messageExpression", "fieldPath", "reason")


def _ordered(schema: Schema) -> Schema:
    ordered = {key: schema[key] for key in _KEY_ORDER if key in schema}
    if VALIDATIONS_KEY in ordered:
        ordered[VALIDATIONS_KEY] = [
            {key: rule[key] for key in _RULE_KEY_ORDER if key in rule}
            for rule in ordered[VALIDATIONS_KEY]
        ]
    unknown = set(schema) - set(ordered)
    if unknown:  # _common refuses unknown keywords; this guards the order list itself
        raise CrdGenerationError(f"internal: no output order for schema keys {sorted(unknown)}")
    return ordered


def _merge(base: Schema, extra: Schema) -> Schema:
    """`base` with `extra`'s keys; CEL rules of both are kept (base's first)."""
    merged = {**base, **extra}
    rules = base.get(VALIDATIONS_KEY, []) + extra.get(VALIDATIONS_KEY, [])
    if rules:
        merged[VALIDATIONS_KEY] = rules
    return merged


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _shown(path: str) -> str:
    return path or "(root)"
