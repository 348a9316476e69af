"""Signing the webhook's bodies (HMAC-SHA256), and checking a signature as a receiver does.

The signed text is `<timestamp>.<body>`: the Unix time in seconds the delivery attempt
was signed at, a dot, and the body's exact bytes. The timestamp travels in its own
header, so a receiver rejects a replayed body once it is older than its tolerance, and
cannot be fooled by a timestamp changed in transit (it is part of what is signed).
"""

from __future__ import annotations

import hashlib
import hmac

# The request's headers (docs/operator.md, "Notifications").
TIMESTAMP_HEADER = "X-Achilles-Timestamp"
SIGNATURE_HEADER = "X-Achilles-Signature"
DELIVERY_HEADER = "X-Achilles-Delivery"
EVENT_HEADER = "X-Achilles-Event"
SIGNATURE_SCHEME = "v1"
# How old a signed timestamp a receiver accepts by default (either way: clocks drift).
DEFAULT_TOLERANCE_SECONDS = 300


class SignatureError(ValueError):
    """A delivery whose signature does not hold (forged, altered, expired, malformed)."""


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    """The value of SIGNATURE_HEADER: `v1=<hex HMAC-SHA256 of "<timestamp>.<body>">`."""
    mac = hmac.new(secret, str(timestamp).encode("ascii") + b"." + body, hashlib.sha256)
    return f"{SIGNATURE_SCHEME}={mac.hexdigest()}"


def verify(
    secret: bytes,
    timestamp_header: str | None,
    signature_header: str | None,
    body: bytes,
    *,
    now: float,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
) -> None:
    """What a receiver does with a delivery; raises SignatureError unless it is genuine
    and fresh. Compares in constant time."""
    if not timestamp_header or not timestamp_header.isdigit():
        raise SignatureError(f"missing or malformed {TIMESTAMP_HEADER}")
    if not signature_header:
        raise SignatureError(f"missing {SIGNATURE_HEADER}")
    timestamp = int(timestamp_header)
    if abs(now - timestamp) > tolerance_seconds:
        raise SignatureError(
            f"{TIMESTAMP_HEADER} is {int(now - timestamp)} s away from now"
            f" (tolerance {tolerance_seconds} s): expired or replayed"
        )
    expected = signature(secret, timestamp, body)
    if not hmac.compare_digest(expected.encode(), signature_header.strip().encode()):
        raise SignatureError("the signature does not match the body and timestamp")
