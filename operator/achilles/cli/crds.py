"""`achilles crds`: regenerate the CRDs from the pydantic models, or check for drift.

`generate` rewrites `crds/*.yaml` and the chart's identical copy; `generate --check`
writes nothing and exits 1 if any committed file differs from what the models say
(CI runs it, as kubebuilder projects run `make verify`).
"""

from __future__ import annotations

from pathlib import Path

import click

from achilles.cli.common import CommandFailed


def _repository_root(start: Path) -> Path:
    for candidate in (start, *start.parents):
        if (candidate / "pyproject.toml").is_file() and (
            candidate / "operator" / "achilles"
        ).is_dir():
            return candidate
    raise click.BadParameter(
        f"{start} is not inside the achilles repository; pass --root", param_hint="--root"
    )


@click.group()
def crds() -> None:
    """CustomResourceDefinitions generated from the pydantic models."""


@crds.command()
@click.option(
    "--root",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Repository root  [default: the repository around the current directory]",
)
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if a generated file drifted.")
def generate(root: Path | None, check: bool) -> None:
    """Write crds/*.yaml and charts/achilles/crds/*.yaml from the models."""
    from achilles.k8s.crd import generate as crdgen

    base = root if root is not None else _repository_root(Path.cwd())
    if check:
        drift = crdgen.find_drift(base)
        for item in drift:
            click.echo(f"drift: {item}", err=True)
        if drift:
            raise CommandFailed(
                f"{len(drift)} generated CRD file(s) out of date; run `achilles crds generate`"
            )
        click.echo("CRDs are up to date")
        return
    changed = crdgen.write(base)
    for path in changed:
        click.echo(f"wrote {path.relative_to(base)}")
    if not changed:
        click.echo("CRDs are up to date; nothing written")
