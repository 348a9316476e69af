"""The operator's settings, from the environment the chart's Deployment sets."""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from achilles.db.superuser_opt_in import ALLOW_SUPERUSER_ENV, allow_superuser
from achilles.domain.pod_outcome import START_DEADLINE
from achilles.domain.runs import STALE_AFTER
from achilles.errors import ConfigurationError, InvalidInputError
from achilles.k8s.jobs import JobTemplate, SecretKey
from achilles.telemetry.settings import exporter_env

# How often every MCP source is listed again (issue 38), unless
# ACHILLES_MCP_RELIST_SECONDS says.
MCP_RELIST_EVERY = 300.0


def _env(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if value is None or value == "":
        raise ConfigurationError(f"{name}: not set")
    return value


def _database_url(name: str) -> str:
    from achilles.db.database import parse_url
    from achilles.db.url_text import URL_EXAMPLE

    if not os.environ.get(name):
        raise ConfigurationError(f"{name}: not set (e.g. {URL_EXAMPLE})")
    value = _env(name)
    try:
        parse_url(value)
    except InvalidInputError as exc:
        raise ConfigurationError(f"{name}: {exc}") from exc
    return value


def _json_object(name: str) -> dict[str, Any]:
    raw = os.environ.get(name, "{}") or "{}"
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{name}: not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ConfigurationError(f"{name}: must be a JSON object (got {raw!r})")
    return value


def _int(name: str, default: int, *, minimum: int, maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{name}: must be a whole number (got {raw!r})") from exc
    if value < minimum or (maximum is not None and value > maximum):
        allowed = f"at least {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise ConfigurationError(f"{name}: must be {allowed} (got {value})")
    return value


@dataclass(frozen=True)
class OperatorConfig:
    database_url: str
    job_template: JobTemplate
    metrics_port: int
    # The reaper's threshold; STALE_AFTER unless a test or an installation shortens it.
    stale_after: timedelta
    # How long a run's pod may take to start (an image pull, a missing Secret) before its
    # run fails; START_DEADLINE unless an installation with slow pulls lengthens it.
    start_deadline: timedelta = START_DEADLINE
    # How often the MCP sources' servers are listed again (issue 38).
    mcp_relist_every: float = MCP_RELIST_EVERY

    @classmethod
    def from_env(cls) -> OperatorConfig:
        command = os.environ.get("ACHILLES_RUNNER_COMMAND")
        # The operator's OTLP exporter settings, if any, go to the runs too (so a run's
        # trace joins its dispatch span in the same collector); ACHILLES_RUNNER_ENV wins.
        extra_env = {**exporter_env(os.environ), **_json_object("ACHILLES_RUNNER_ENV")}
        if allow_superuser():  # a first try with one superuser URL: the runs may use it too
            extra_env.setdefault(ALLOW_SUPERUSER_ENV, "true")
        resources = _json_object("ACHILLES_RUNNER_RESOURCES")
        template = JobTemplate(
            namespace=_env("ACHILLES_RUNS_NAMESPACE", "achilles-runs"),
            image=_env("ACHILLES_RUNNER_IMAGE", "achilles-runner:latest"),
            database_secret=SecretKey(
                _env("ACHILLES_RUNNER_DATABASE_SECRET", "achilles-runner-database"),
                _env("ACHILLES_RUNNER_DATABASE_SECRET_KEY", "url"),
            ),
            command=tuple(shlex.split(command)) if command else ("achilles", "runner"),
            image_pull_policy=_env("ACHILLES_RUNNER_IMAGE_PULL_POLICY", "IfNotPresent"),
            ttl_seconds_after_finished=_int("ACHILLES_RUNNER_TTL_SECONDS", 3600, minimum=0),
            resources=resources,
            extra_env=tuple(sorted((str(k), str(v)) for k, v in extra_env.items())),
        )
        return cls(
            database_url=_database_url("ACHILLES_DATABASE_URL"),
            job_template=template,
            metrics_port=_int("ACHILLES_METRICS_PORT", 9090, minimum=0, maximum=65535),
            stale_after=timedelta(
                seconds=_int(
                    "ACHILLES_STALE_AFTER_SECONDS", int(STALE_AFTER.total_seconds()), minimum=1
                )
            ),
            start_deadline=timedelta(
                seconds=_int(
                    "ACHILLES_START_DEADLINE_SECONDS",
                    int(START_DEADLINE.total_seconds()),
                    minimum=1,
                )
            ),
            mcp_relist_every=float(
                _int("ACHILLES_MCP_RELIST_SECONDS", int(MCP_RELIST_EVERY), minimum=5)
            ),
        )
