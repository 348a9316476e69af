"""What the custom resources share: base models, name formats, conditions, metadata.

The base models make pydantic read a manifest the way the API server does, so that the
two agree on every input (a cluster test holds them to it):
- strict types: `"6"` is not an integer, `"true"` is not a boolean;
- unknown fields are errors (the API server rejects them under strict field validation,
  which kubectl uses by default);
- `null` means absent: the API server drops a null field that is not nullable before it
  validates (apiextensions `PruneNonNullableNullsWithoutDefaults`), so a default then
  applies. Our CRDs declare nothing nullable; see `achilles.k8s.crd.openapi`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

API_GROUP = "achilles.io"
API_VERSION_NAME = "v1alpha1"
API_VERSION = f"{API_GROUP}/{API_VERSION_NAME}"

# RFC 1123 subdomain: what Kubernetes accepts as the name of most objects.
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_SUBDOMAIN_MAX_LENGTH = 253

ResourceName = Annotated[
    str,
    Field(min_length=1, max_length=DNS_SUBDOMAIN_MAX_LENGTH, pattern=DNS_SUBDOMAIN_PATTERN),
]

MAX_CONDITIONS = 16
MAX_MESSAGE_LENGTH = 32768  # metav1.Condition.message


def drop_nulls(data: Any) -> Any:
    """A mapping without its null-valued keys (one level; nested models do their own)."""
    if isinstance(data, dict):
        return {key: value for key, value in data.items() if value is not None}
    return data


class SpecModel(BaseModel):
    """Base of what people write (`spec` and its parts): read exactly as the API server does."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,  # `display_name` is not a field of the CR; `displayName` is
        serialize_by_alias=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _null_means_absent(cls, data: Any) -> Any:
        return drop_nulls(data)


class StatusModel(BaseModel):
    """Base of what the operator writes (`status`): lax types, since times arrive as text."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=True,  # the operator builds these in Python
        serialize_by_alias=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _null_means_absent(cls, data: Any) -> Any:
        return drop_nulls(data)


class Condition(StatusModel):
    """A `metav1.Condition`: why a resource is (not) usable, in the shape kubectl knows."""

    type: str = Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        description="What the condition is about, e.g. Ready.",
    )
    status: Literal["True", "False", "Unknown"] = Field(description="Whether the condition holds.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation the condition describes."
    )
    last_transition_time: datetime = Field(description="When the status last changed.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="Why, in one CamelCase word (for programs).",
    )
    message: str = Field(
        default="", max_length=MAX_MESSAGE_LENGTH, description="Why, in words (for people)."
    )


def _unique_condition_types(conditions: list[Condition]) -> list[Condition]:
    types = [condition.type for condition in conditions]
    duplicates = sorted({kind for kind in types if types.count(kind) > 1})
    if duplicates:
        raise ValueError(f"duplicate condition type(s): {', '.join(duplicates)}")
    return conditions


Conditions = Annotated[
    list[Condition],
    Field(
        max_length=MAX_CONDITIONS,
        # One entry per type, merged by type under server-side apply.
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    ),
    # The list-map's key is unique on the API server; pydantic holds it to the same.
    AfterValidator(_unique_condition_types),
]


class ResourceStatus(StatusModel):
    """What every kind's status says: its conditions, the generation they describe, and
    kopf's bookkeeping. A kind's status model adds its own fields after these."""

    conditions: Conditions = Field(
        default_factory=list, description="The resource's conditions, one per type."
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation this status describes."
    )
    # kopf keeps its own bookkeeping under status.kopf; its shape is kopf's business, so it
    # is the one place where unknown fields are preserved rather than pruned.
    kopf: dict[str, Any] | None = Field(
        default=None,
        description="The kopf framework's own bookkeeping (opaque to users).",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


def _describe_database_id(schema: dict[str, Any], model: type[BaseModel]) -> None:
    table = getattr(model, "database_table", None)
    if table is not None:
        schema["properties"]["databaseId"]["description"] = f"{table}.id"


class RowStatus(ResourceStatus):
    """The status of a kind the operator reconciles into one database row: `databaseId` is
    that row's id, described in the schema as `<database_table>.id`."""

    model_config = ConfigDict(json_schema_extra=_describe_database_id)

    database_table: ClassVar[str]
    database_id: int | None = Field(default=None, ge=1)


class ObjectMeta(BaseModel):
    """The part of `metadata` the engine reads; the API server owns the rest."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: str | None = None
    generate_name: str | None = Field(default=None, alias="generateName")
    namespace: str | None = None


class CustomResource(BaseModel):
    """A whole manifest: apiVersion, kind, metadata, spec (and status, when read back)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    api_version: Literal["achilles.io/v1alpha1"] = Field(alias="apiVersion")
    metadata: ObjectMeta
