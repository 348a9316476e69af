"""`achilles operator`: the one entry point of the operator (kopf, `achilles.handlers`).

The chart's Deployment runs it in-cluster (service account); locally it uses the
kubeconfig (KUBECONFIG). Settings come from the environment (`handlers/config.py`).
"""

from __future__ import annotations

import click

from achilles.cli.common import HttpEndpoint


@click.command()
@click.option(
    "--liveness",
    type=HttpEndpoint(),
    default="http://0.0.0.0:8080/healthz",
    show_default=True,
    help="kopf's liveness endpoint (the chart's probes call it); '' to disable.",
)
@click.option("--verbose", is_flag=True, help="kopf's debug logging.")
def operator(liveness: str, verbose: bool) -> None:
    """Run the operator: reconcile the CRs, schedule, dispatch Jobs, reap."""
    import asyncio
    import logging

    import kopf
    from prometheus_client import start_http_server

    import achilles.handlers  # noqa: F401 - registers the handlers
    from achilles.cli.common import CommandFailed
    from achilles.handlers.config import OperatorConfig
    from achilles.k8s.client import load_configuration

    config = OperatorConfig.from_env()  # fail fast, with a one-line error, on bad settings
    # No cluster configured at all (no kubeconfig, not in a pod) is a setting, not an
    # outage: say so once (exit 1) rather than let kopf retry its start-up every minute.
    load_configuration()
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # every webhook delivery
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # every liveness probe
    try:
        start_http_server(config.metrics_port)
    except OSError as exc:
        raise CommandFailed(
            f"cannot serve metrics on port {config.metrics_port}: {exc.strerror or exc}"
            " (ACHILLES_METRICS_PORT; 0 picks any free port)"
        ) from exc
    _refuse_powerful_login(config.database_url)
    asyncio.run(
        kopf.operator(
            clusterwide=True,
            standalone=True,
            liveness_endpoint=liveness or None,
        )
    )


# How often the start-up check retries a database that does not answer yet.
LOGIN_CHECK_RETRY_SECONDS = 5.0


def _refuse_powerful_login(database_url: str) -> None:
    """Refuse a superuser, BYPASSRLS or owner login (exit 1, saying why) before anything
    runs; wait for a database that is not up yet rather than run unchecked."""
    import logging
    import time

    from achilles.cli.common import CommandFailed
    from achilles.db.database import Database
    from achilles.db.roles import Component
    from achilles.db.superuser_opt_in import allow_superuser
    from achilles.errors import ConfigurationError, DatabaseUnavailable
    from achilles.services import db_roles

    database = Database(database_url, pool_size=1, application_name="achilles-operator")
    try:
        while True:
            try:
                db_roles.refuse_powerful_login(
                    database, Component.OPERATOR, allow=allow_superuser()
                )
                return
            except ConfigurationError as exc:
                raise CommandFailed(str(exc)) from exc
            except DatabaseUnavailable as exc:
                logging.getLogger(__name__).warning(
                    "%s; checking the operator's login again in %g s",
                    exc,
                    LOGIN_CHECK_RETRY_SECONDS,
                )
                time.sleep(LOGIN_CHECK_RETRY_SECONDS)
    finally:
        database.dispose()
