"""The per-run secret: what lets a run pod's shared database login act for its run only.

The operator makes a fresh one for each Job it creates, puts it in the Job's environment
and stores only its SHA-256 in the run's row (migration 0011_least_privilege); the
runner's session carries it, and the database's policies compare hashes.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

RUN_SECRET_ENV = "ACHILLES_RUN_SECRET"  # noqa: S105 - an environment variable's name
# The session settings the runner's connections carry (read by `achilles_run_id()`).
RUN_ID_SETTING = "achilles.run_id"
RUN_SECRET_SETTING = "achilles.run_secret"  # noqa: S105 - a setting's name
_BYTES = 32


@dataclass(frozen=True)
class RunSecret:
    value: str  # URL-safe base64: safe in an environment variable and in libpq options

    @classmethod
    def new(cls) -> RunSecret:
        return cls(secrets.token_urlsafe(_BYTES))

    @property
    def digest(self) -> bytes:
        return hashlib.sha256(self.value.encode()).digest()

    def __repr__(self) -> str:  # never in a log line
        return "RunSecret(***)"


def session_settings(run_id: int, secret: str) -> dict[str, str]:
    return {RUN_ID_SETTING: str(run_id), RUN_SECRET_SETTING: secret}
