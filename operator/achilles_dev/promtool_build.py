"""Build promtool (Prometheus' rule checker) once, to validate the chart's alerts.

promtool comes from the Go module proxy at the version `versions.toml` pins
(`[prometheus] version`: module v0.3XX.Y is Prometheus v3.XX.Y), built the way
`achilles_dev.build` builds the control plane (a throwaway module that requires it,
compiled statically, its release stamped as upstream's Makefile does). The binary is
cached under `~/.cache/achilles/promtool-<version>/bin/promtool` (or
`$ACHILLES_CACHE_DIR`): built once per version, reused by every test session on the
machine. A file lock keeps two builds from racing; the loser finds the binary built.

`python -m achilles_dev.promtool_build` builds it and prints its path.
"""

from __future__ import annotations

import sys
from pathlib import Path

from achilles.errors import LocalStackError
from achilles_dev.build import GoBinary
from achilles_dev.go_tools import Report, build_go_tool, quiet
from achilles_dev.versions import cache_root, prometheus_version

BINARY_NAME = "promtool"
_MODULE = "github.com/prometheus/prometheus"
_VERSION_PACKAGE = "github.com/prometheus/common/version"


def prometheus_release(module_version: str) -> str:
    """The Prometheus release a module version is: v0.316.0 -> 3.16.0."""
    parts = module_version.lstrip("v").split(".")
    if len(parts) != 3 or parts[0] != "0" or not all(p.isdigit() for p in parts):
        raise LocalStackError(f"not a Prometheus module version (v0.3XX.Y): {module_version!r}")
    minor = int(parts[1])
    if minor < 300:
        raise LocalStackError(
            f"Prometheus module versions before v0.300.0 are 2.x: {module_version}"
        )
    return f"3.{minor - 300}.{parts[2]}"


def _binary(version: str) -> GoBinary:
    return GoBinary(
        name=BINARY_NAME,
        module=_MODULE,
        version=version,
        package=f"{_MODULE}/cmd/promtool",
        ldflags=(
            f"-X {_VERSION_PACKAGE}.Version={prometheus_release(version)}",
            f"-X {_VERSION_PACKAGE}.Branch=HEAD",
            f"-X {_VERSION_PACKAGE}.Revision={version}",
        ),
        version_argv=("--version",),
    )


def binary_path() -> Path:
    """Where promtool of the pinned version is (or goes)."""
    return cache_root() / f"{BINARY_NAME}-{prometheus_version()}" / "bin" / BINARY_NAME


def ensure_promtool_built(*, report: Report = quiet) -> Path:
    """promtool's binary, built first if this version never was (a cold build compiles
    for minutes)."""
    version = prometheus_version()
    release = prometheus_release(version)
    return build_go_tool(
        _binary(version), binary_path(), reports=f"version {release}", report=report
    )


def main() -> None:
    try:
        print(ensure_promtool_built(report=lambda line: print(line, file=sys.stderr, flush=True)))
    except LocalStackError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from error


if __name__ == "__main__":
    main()
