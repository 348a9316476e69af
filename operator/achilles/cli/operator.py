"""`achilles operator`: the one entry point of the operator (kopf, `achilles.handlers`).

The chart's Deployment runs it in-cluster (service account); locally it uses the
kubeconfig (KUBECONFIG). Settings come from the environment (`handlers/config.py`).
"""

from __future__ import annotations

import click


@click.command()
@click.option(
    "--liveness",
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
    from achilles.handlers.config import OperatorConfig

    config = OperatorConfig.from_env()  # fail fast, with a one-line error, on bad settings
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # every liveness probe
    start_http_server(config.metrics_port)
    asyncio.run(
        kopf.operator(
            clusterwide=True,
            standalone=True,
            liveness_endpoint=liveness or None,
        )
    )
