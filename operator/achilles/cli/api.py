"""`achilles api`: serve the HTTP API (and the web inbox, when configured) with uvicorn.

Settings come from the environment only (`achilles.api.settings`, docs/api.md), read once
at start: a missing or malformed one is one `error:` line and exit code 2, before anything
listens. The chart's Deployment runs this command; its probes call /healthz and /readyz.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from achilles.db.database import Database

DEFAULT_PORT = 8000


@click.command()
@click.option("--host", default="0.0.0.0", show_default=True, help="Address to listen on.")  # noqa: S104 - a server in a pod listens on all addresses
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="Port to listen on (0 picks a free one).",
)
@click.option("--verbose", is_flag=True, help="Log every request.")
def api(host: str, port: int, verbose: bool) -> None:
    """Serve the HTTP API: a person's agents, runs and inbox (docs/api.md)."""
    import logging
    import os

    import uvicorn

    from achilles.api.app import create_app
    from achilles.api.http_protocol import with_head_timeout
    from achilles.api.settings import load_settings
    from achilles.db.database import Database

    settings = load_settings(os.environ)  # ConfigurationError: one line, exit 2
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    listener = _listen(host, port)  # a busy port: one line, exit 1, before any work
    database = Database(settings.database_url, pool_size=10, application_name="achilles-api")
    _refuse_powerful_login(database)
    app = create_app(settings, database)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            access_log=verbose,
            log_level="info",
            proxy_headers=False,  # no header is trusted, not even a proxy's
            server_header=False,
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            # A request's head must be whole in time (slowloris; issue 37).
            http=with_head_timeout(settings.header_timeout_seconds),
            h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        )
    )
    bound_host, bound_port = listener.getsockname()[:2]
    click.echo(f"achilles api listening on http://{bound_host}:{bound_port}", err=True)
    try:
        server.run(sockets=[listener])
    finally:
        listener.close()
        database.dispose()
        probe = getattr(app.state, "probe_database", None)  # routers/health.py
        if probe is not None:
            probe.dispose()


# How long an idle keep-alive connection stays open. uvicorn's 5 s equals the idle expiry
# of common clients (httpx) and is shorter than proxies' (an Ingress, a load balancer):
# the server then closes a connection just as the client reuses it, and the request
# dies with "connection reset" (seen with 40 writers on a loaded machine). Longer than
# the clients' and proxies' idle timeouts, the client always closes first.
KEEP_ALIVE_SECONDS = 75
# The largest request head (request line and headers) uvicorn reads: bearer tokens and
# the session cookie fit many times over.
MAX_HEAD_BYTES = 32 * 1024


def _listen(host: str, port: int) -> socket.socket:
    from achilles.cli.common import CommandFailed

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY only on accepted sockets
    # whose protocol says TCP, and without it every response (headers, then body: two
    # writes) waited out the client's delayed ACK, 40 ms (`achilles bench api`).
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
        listener.listen(2048)
    except OSError as exc:
        listener.close()
        raise CommandFailed(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    listener.set_inheritable(True)
    return listener


def _refuse_powerful_login(database: Database) -> None:
    """A superuser, BYPASSRLS or owner login: exit 1 saying why (ACHILLES_ALLOW_SUPERUSER
    overrides). A database that does not answer yet is the readiness probe's to report."""
    import logging

    from achilles.cli.common import CommandFailed
    from achilles.db.roles import Component
    from achilles.db.superuser_opt_in import allow_superuser
    from achilles.errors import ConfigurationError, DatabaseUnavailable
    from achilles.services import db_roles

    try:
        db_roles.refuse_powerful_login(database, Component.API, allow=allow_superuser())
    except ConfigurationError as exc:
        raise CommandFailed(str(exc)) from exc
    except DatabaseUnavailable:
        logging.getLogger(__name__).warning("database unreachable: the login is not checked")
