"""`python -m achilles` is the `achilles` console script."""

from achilles.cli.main import cli

cli()
