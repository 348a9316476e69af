"""kopf's side of the operator: its settings, the engine's start and stop, the probe.

Every setting is explicit, with why: the defaults of a framework are not a decision.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import kopf

from achilles.db.database import Database
from achilles.handlers.config import OperatorConfig
from achilles.handlers.loops import Engine
from achilles.k8s.client import api_client
from achilles.k8s.jobs import RunJobs
from achilles.k8s.objects import Resources
from achilles.k8s.resources.common import API_GROUP

ENGINE_KEY = "engine"


@kopf.on.startup()
def configure(
    settings: kopf.OperatorSettings, memo: kopf.Memo, logger: kopf.Logger, **_: Any
) -> None:
    # Our own prefix for kopf's bookkeeping, so it never collides with another operator's.
    settings.persistence.finalizer = f"{API_GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=API_GROUP, key="last-handled-configuration"
    )
    # API calls must not hang a handler forever on a dead connection.
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 10
    # A watch that hears nothing for this long is restarted (half-open TCP connections).
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.inactivity_timeout = 600
    settings.watching.reconnect_backoff = 1.0
    # Our handlers are level-triggered and idempotent: retry soon after an error.
    settings.execution.max_workers = 16
    # Only warnings and errors become Kubernetes Events; our own Events say the rest.
    settings.posting.level = logging.WARNING
    # Standby replicas are safe without kopf peering: every decision that could be
    # taken twice is taken in PostgreSQL (SKIP LOCKED, advisory lock, unique indexes).
    # Peering would not make one replica the only actor anyway: a frozen kopf stops its
    # own watch-streams and its daemons/timers (kopf docs/peering.rst, "Priorities";
    # nolar/kopf#675), not the threads our startup handler starts (handlers/loops.py).
    # Standalone, per the same page, means two replicas may both react to one event:
    # our handlers are idempotent and the database decides, so that is harmless.
    settings.peering.standalone = True
    settings.peering.mandatory = False

    config = OperatorConfig.from_env()
    database = Database(config.database_url, pool_size=10, application_name="achilles-operator")
    api = api_client()
    engine = Engine(
        config=config,
        database=database,
        resources=Resources(api),
        jobs=RunJobs(api, config.job_template.namespace),
    )
    memo[ENGINE_KEY] = engine
    engine.start()
    logger.info("achilles engine started: runs in namespace %s", config.job_template.namespace)


@kopf.on.cleanup()
def shutdown(memo: kopf.Memo, **_: Any) -> None:
    engine = memo.get(ENGINE_KEY)
    if isinstance(engine, Engine):
        engine.shutdown()
        engine.database.dispose()


@kopf.on.probe(id="loops")
def loops_health(memo: kopf.Memo, **_: Any) -> dict[str, float]:
    """Seconds since each loop last completed a pass (the liveness endpoint shows it)."""
    engine = memo.get(ENGINE_KEY)
    return engine.health() if isinstance(engine, Engine) else {}


def retried(handler: Callable[..., None]) -> Callable[..., None]:
    """An event handler whose failure (database down, API error) is retried by the
    engine's sweeper until it succeeds or a newer event of the object supersedes it.

    kopf does not retry `on.event` handlers, and an object may see no other event for a
    long time: without this a reconcile lost to a database restart would stay lost.
    """

    @functools.wraps(handler)
    def wrapper(**kwargs: Any) -> None:
        engine = engine_of(kwargs["memo"])
        key = f"{handler.__name__}/{kwargs['meta'].get('uid')}"
        try:
            handler(**kwargs)
        except kopf.TemporaryError:
            raise
        except Exception as exc:
            kwargs["logger"].warning("%s failed (%s); it will be retried", handler.__name__, exc)
            engine.retry_later(key, lambda: wrapper(**kwargs))
        else:
            engine.retry_done(key)

    return wrapper


def engine_of(memo: kopf.Memo) -> Engine:
    engine = memo.get(ENGINE_KEY)
    if not isinstance(engine, Engine):
        raise kopf.TemporaryError("the engine is starting", delay=2)
    return engine
