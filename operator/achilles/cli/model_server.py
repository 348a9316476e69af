"""`achilles model-server`: the offline OpenAI-compatible model for demos and tests."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from achilles.cli.common import CommandFailed, WholeNumber, reports_errors


@click.command("model-server")
@click.option(
    "--script",
    "script_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="YAML/JSON model script (format: achilles/modelserver/script.py); default: the demo.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=WholeNumber(0, 65535),
    default=8400,
    show_default=True,
    help="Port to listen on (0: any free port; the chosen one is printed).",
)
@click.option(
    "--api-key",
    envvar="ACHILLES_MODEL_SERVER_API_KEY",
    help="Require this bearer token  [env: ACHILLES_MODEL_SERVER_API_KEY]",
)
@click.option("--check", is_flag=True, help="Only validate the script, then exit.")
@reports_errors
def model_server(
    script_path: Path | None, host: str, port: int, api_key: str | None, check: bool
) -> None:
    """Serve /v1/chat/completions from a declarative script, until interrupted."""
    from achilles.modelserver.script import DEFAULT_SCRIPT_PATH, load_script
    from achilles.modelserver.server import ModelServer

    script = load_script(script_path)
    source = script_path or DEFAULT_SCRIPT_PATH
    if check:
        click.echo(f"{source}: {len(script.rules)} rule(s), valid")
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        server = ModelServer(script, host=host, port=port, api_key=api_key)
    except OSError as exc:
        raise CommandFailed(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}"
            " (check --host and --port; --port 0 picks any free port)"
        ) from exc
    click.echo(f"model server listening on {server.base_url} (script: {source})")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        click.echo("model server stopped")
