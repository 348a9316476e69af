"""Build Jaeger v2 once, the OpenTelemetry collector the trace tests export to.

Jaeger v2 (`cmd/jaeger`) is an OpenTelemetry Collector with Jaeger's storage and query
API: it receives OTLP over HTTP, keeps spans in memory and serves a trace by its id, all
the trace tests need. It comes from the Go module proxy at the version `versions.toml`
pins (`[jaeger] version`), built the way `achilles_dev.promtool_build` builds promtool
(a throwaway module that requires it, compiled statically, its release stamped as
upstream's Makefile does), and is cached under
`~/.cache/achilles/jaeger-<version>/bin/jaeger` (or `$ACHILLES_CACHE_DIR`): built once
per version, reused by every test session on the machine. A file lock keeps two builds
from racing; the loser finds the binary built.

A cold build compiles about 2,000 packages (docs/observability.md has its time);
`ensure_jaeger_built` runs it at low CPU priority (`nice`), beside other work.
`python -m achilles_dev.jaeger_build` builds it and prints its path.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from achilles.errors import LocalStackError
from achilles_dev.build import GoBinary
from achilles_dev.go_tools import Report, build_go_tool, quiet
from achilles_dev.versions import cache_root, jaeger_version

BINARY_NAME = "jaeger"
_MODULE = "github.com/jaegertracing/jaeger"
_VERSION_PACKAGE = f"{_MODULE}/internal/version"
# A cold build may take this long on a busy two-core machine.
BUILD_TIMEOUT = 3600.0


def _binary(version: str) -> GoBinary:
    return GoBinary(
        name=BINARY_NAME,
        module=_MODULE,
        version=version,
        package=f"{_MODULE}/cmd/jaeger",
        ldflags=(f"-X {_VERSION_PACKAGE}.latestVersion={version}",),
        version_argv=("version",),
    )


def binary_path() -> Path:
    """Where Jaeger of the pinned version is (or goes)."""
    return cache_root() / f"{BINARY_NAME}-{jaeger_version()}" / "bin" / BINARY_NAME


def build_jaeger(*, report: Report = quiet) -> Path:
    """Jaeger's binary, built in this process first if this version never was."""
    version = jaeger_version()
    return build_go_tool(_binary(version), binary_path(), reports=version, report=report)


def ensure_jaeger_built(*, report: Report = quiet) -> Path:
    """Jaeger's binary; a cold build runs in a process of its own at low CPU priority
    (`nice -n 10`), its progress lines reported."""
    target = binary_path()
    if target.exists():
        return target
    process = subprocess.Popen(
        ["nice", "-n", "10", sys.executable, "-m", "achilles_dev.jaeger_build"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    tail: list[str] = []
    for line in process.stdout:
        tail = [*tail[-30:], line.rstrip()]
        report(line.rstrip())
    if process.wait(timeout=BUILD_TIMEOUT) != 0 or not target.exists():
        raise LocalStackError("building Jaeger failed:\n" + "\n".join(tail))
    return target


def main() -> None:
    try:
        path = build_jaeger(report=lambda line: print(line, file=sys.stderr, flush=True))
    except LocalStackError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from error
    print(path, flush=True)


if __name__ == "__main__":
    main()
