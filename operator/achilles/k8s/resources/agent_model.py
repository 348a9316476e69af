"""The AgentModel custom resource: one entry of the admin allowlist of chat models.

Cluster-scoped, curated by admins. At most one model is the list's `default` (the
preset for new agents). No CRD rule can see other objects, so the chart's admission
policy refuses a second default at create/update time, and the operator reports any
that slip through (two concurrent creates) in `status.conditions`; the database's
partial unique index on `agent_models.is_default` is the final word.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from achilles.k8s.resources.common import (
    CustomResource,
    ResourceName,
    RowStatus,
    SpecModel,
)

# OpenAI-compatible endpoint; any non-blank URL text after the scheme.
BASE_URL_PATTERN = r"^https?://[^ \t\r\n]+$"
BASE_URL_MAX_LENGTH = 2048
PROVIDER_MODEL_MAX_LENGTH = 256
# A key of a Secret's data, as Kubernetes allows it.
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"  # noqa: S105 - a key name format, not a secret


class SecretKeyRef(SpecModel):
    """A key of a Secret in the runs namespace."""

    name: ResourceName = Field(description="The Secret's name.")
    key: str = Field(
        min_length=1,
        max_length=253,
        pattern=SECRET_KEY_PATTERN,
        description="The key in the Secret that holds the API key.",
    )


class AgentModelSpec(SpecModel):
    """A chat model agents may use."""

    base_url: str = Field(
        alias="baseURL",
        min_length=1,
        max_length=BASE_URL_MAX_LENGTH,
        pattern=BASE_URL_PATTERN,
        description="Base URL of the OpenAI-compatible API, e.g. https://llm.example.org/v1.",
    )
    model: str = Field(
        min_length=1,
        max_length=PROVIDER_MODEL_MAX_LENGTH,
        description="The provider's model id sent with each request.",
    )
    api_key_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="Secret (in the runs namespace) holding the API key; absent = no key.",
    )
    is_default: bool = Field(
        default=False,
        alias="default",
        description="The list's preset for new agents; at most one model has it.",
    )


class AgentModelStatus(RowStatus):
    """What the operator reports about the model."""

    database_table = "agent_models"


class AgentModelResource(CustomResource):
    """A chat model on the admin allowlist agents choose from."""

    kind: Literal["AgentModel"]
    spec: AgentModelSpec
    status: AgentModelStatus | None = None
