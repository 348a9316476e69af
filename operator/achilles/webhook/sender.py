"""POST one signed notification to the webhook (docs/operator.md, "Notifications").

Every attempt is bounded by timeouts (connect, read, write, pool), so a receiver that
accepts the connection and never answers costs one timeout, never the notifier loop.
Redirects are not followed: a receiver answers where it was configured.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import httpx

from achilles.domain.webhook_signature import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    signature,
)

DEFAULT_TIMEOUT_SECONDS = 10.0
CONNECT_TIMEOUT_SECONDS = 5.0
USER_AGENT = "achilles-notifier/1"


@dataclass(frozen=True)
class SendResult:
    """None error: delivered (a 2xx). `transport`: the receiver could not be reached or
    did not answer in time (the next deliveries of the batch would wait the same)."""

    error: str | None
    transport: bool = False


class WebhookSender:
    def __init__(self, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        self.timeout_seconds = timeout_seconds
        timeout = httpx.Timeout(
            timeout_seconds, connect=min(CONNECT_TIMEOUT_SECONDS, timeout_seconds)
        )
        self.client = httpx.Client(timeout=timeout, follow_redirects=False)

    def close(self) -> None:
        self.client.close()

    def send(
        self, url: str, secret: bytes, delivery_id: uuid.UUID, event: str, body: bytes
    ) -> SendResult:
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: signature(secret, timestamp, body),
            DELIVERY_HEADER: str(delivery_id),
            EVENT_HEADER: event,
        }
        try:
            response = self.client.post(url, content=body, headers=headers)
        except httpx.TimeoutException as exc:
            return SendResult(
                f"no answer within {self.timeout_seconds:g} s ({type(exc).__name__})",
                transport=True,
            )
        except httpx.HTTPError as exc:
            return SendResult(f"{type(exc).__name__}: {exc}", transport=True)
        if 200 <= response.status_code < 300:
            return SendResult(None)
        excerpt = response.text[:200].strip()
        return SendResult(f"HTTP {response.status_code}{': ' + excerpt if excerpt else ''}")
