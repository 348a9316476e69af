"""The runner's settings and their defaults (light: the CLI imports this at startup)."""

from __future__ import annotations

from dataclasses import dataclass, field

from achilles.domain.runs import HEARTBEAT_INTERVAL

API_KEY_ENV = "ACHILLES_MODEL_API_KEY"
HEARTBEAT_ENV = "ACHILLES_HEARTBEAT_INTERVAL"
MODEL_TIMEOUT_ENV = "ACHILLES_MODEL_TIMEOUT"
MODEL_MAX_RETRIES_ENV = "ACHILLES_MODEL_MAX_RETRIES"

DEFAULT_HEARTBEAT_SECONDS = HEARTBEAT_INTERVAL.total_seconds()
# One model request; the run's own deadline (agent_run_timeout_seconds) caps it further.
DEFAULT_MODEL_TIMEOUT = 120.0
# The openai client retries connection errors, 408/409/429 and 5xx with backoff.
DEFAULT_MODEL_MAX_RETRIES = 2


@dataclass(frozen=True)
class RunnerConfig:
    run_id: int
    database_url: str
    api_key: str | None  # None: the Job passed no key (fine for keyless models)
    # The run's secret (ACHILLES_RUN_SECRET); None: a login that needs none (superuser).
    run_secret: str | None = field(default=None, repr=False)
    # ACHILLES_ALLOW_SUPERUSER: run even as a login that is more than a runner (a first try).
    allow_superuser: bool = False
    heartbeat_interval: float = DEFAULT_HEARTBEAT_SECONDS
    model_timeout: float = DEFAULT_MODEL_TIMEOUT
    model_max_retries: int = DEFAULT_MODEL_MAX_RETRIES
