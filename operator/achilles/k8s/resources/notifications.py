"""The AgentPlatform's `notifications`: the webhook the portal receives them at."""

from __future__ import annotations

from pydantic import Field

from achilles.k8s.resources.agent_model import SECRET_KEY_PATTERN
from achilles.k8s.resources.common import ResourceName, SpecModel

WEBHOOK_URL_PATTERN = r"^https?://[^ \t\r\n]+$"
WEBHOOK_URL_MAX_LENGTH = 2048
DEFAULT_SECRET_KEY = "secret"  # noqa: S105 - the key's name, not a secret
MAX_RUN_RETENTION_DAYS = 36500


class WebhookSecretRef(SpecModel):
    """A key of a Secret in the runs namespace (the operator reads it by name)."""

    name: ResourceName = Field(description="The Secret's name.")
    key: str = Field(
        default=DEFAULT_SECRET_KEY,
        min_length=1,
        max_length=253,
        pattern=SECRET_KEY_PATTERN,
        description="The key in the Secret that holds the signing secret.",
    )


class NotificationsSpec(SpecModel):
    """Where notifications go: an inbox item blocked, a run failed or skipped, a budget
    threshold crossed, an agent suspended (docs/operator.md, "Notifications")."""

    webhook_url: str = Field(
        min_length=1,
        max_length=WEBHOOK_URL_MAX_LENGTH,
        pattern=WEBHOOK_URL_PATTERN,
        description="URL each notification is POSTed to (http or https).",
    )
    secret_ref: WebhookSecretRef = Field(
        description="Secret (in the runs namespace, listed in the chart's "
        "operator.rbac.secretNames) whose key signs each body with HMAC-SHA256.",
    )
