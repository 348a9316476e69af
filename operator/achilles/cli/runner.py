"""`achilles runner --run-id N`: execute one queued run (the command of the run's Job).

Exit codes are the runner's own (see `achilles.runner.main`): 0 when the run
was carried to an end or was not claimable, 1 for a crash; 2 for bad options.
"""

from __future__ import annotations

import logging

import click

from achilles.cli.common import CommandFailed, Seconds, WholeNumber, claim_database_url_option
from achilles.runner.config import (
    API_KEY_ENV,
    DEFAULT_HEARTBEAT_SECONDS,
    DEFAULT_MODEL_MAX_RETRIES,
    DEFAULT_MODEL_TIMEOUT,
    HEARTBEAT_ENV,
    MODEL_MAX_RETRIES_ENV,
    MODEL_TIMEOUT_ENV,
    RunnerConfig,
)


@click.command()
@click.option("--run-id", type=WholeNumber(min=1), required=True, help="The agent_runs id.")
@claim_database_url_option
@click.option(
    "--heartbeat-interval",
    type=Seconds(min=0, min_open=True),
    envvar=HEARTBEAT_ENV,
    default=DEFAULT_HEARTBEAT_SECONDS,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between heartbeats  [env: ACHILLES_HEARTBEAT_INTERVAL]",
)
@click.option(
    "--model-timeout",
    type=Seconds(min=0, min_open=True),
    envvar=MODEL_TIMEOUT_ENV,
    default=DEFAULT_MODEL_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="Timeout of one model API request  [env: ACHILLES_MODEL_TIMEOUT]",
)
@click.option(
    "--model-max-retries",
    type=WholeNumber(min=0),
    envvar=MODEL_MAX_RETRIES_ENV,
    default=DEFAULT_MODEL_MAX_RETRIES,
    show_default=True,
    help="Retries of a failed model API request  [env: ACHILLES_MODEL_MAX_RETRIES]",
)
def runner(
    run_id: int,
    database_url: str | None,
    heartbeat_interval: float,
    model_timeout: float,
    model_max_retries: int,
) -> None:
    """Claim run RUN_ID, run the agent loop, record the outcome in the journal.

    The model's API key comes from the environment variable ACHILLES_MODEL_API_KEY
    (the Job maps the AgentModel's Secret to it); the run's secret, which lets the
    runner's database login act for this run only, from ACHILLES_RUN_SECRET (the
    operator puts a fresh one in each Job; a superuser URL needs none).
    """
    import os

    from achilles.runner.startup import permanent_imports

    # The claim's stack (psycopg): most of a pod's time to its claim.
    with permanent_imports():
        from achilles.db.superuser_opt_in import allow_superuser
        from achilles.db.url_text import database_url_from_env
        from achilles.domain.run_secret import RUN_SECRET_ENV
        from achilles.errors import AchillesError
        from achilles.runner.main import run

    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s %(levelname)s run={run_id} %(name)s: %(message)s",
    )
    try:
        config = RunnerConfig(
            run_id=run_id,
            database_url=database_url or database_url_from_env(),
            api_key=os.environ.get(API_KEY_ENV) or None,
            run_secret=os.environ.get(RUN_SECRET_ENV) or None,
            allow_superuser=allow_superuser(),
            heartbeat_interval=heartbeat_interval,
            model_timeout=model_timeout,
            model_max_retries=model_max_retries,
        )
        code = run(config)
    except AchillesError as exc:
        # Before the claim (no database, bad configuration): nothing was written.
        raise CommandFailed(str(exc)) from exc
    raise SystemExit(code)
