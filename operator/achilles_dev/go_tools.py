"""Go tools built once per version from the Go module proxy, beside the control plane:
promtool, Jaeger, kind and the rest the tests need. Each is cached under
`~/.cache/achilles/<name>-<version>/bin/` (or `$ACHILLES_CACHE_DIR`), built the way
`achilles_dev.build` builds the control plane (a throwaway module that requires the
upstream one, compiled statically, its release stamped as upstream's Makefile does). A
file lock keeps two builds from racing; the loser finds the binary built.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from achilles.errors import LocalStackError
from achilles_dev.build import GoBinary, _build_lock, _compile, _prepare_module
from achilles_dev.versions import load_versions

Report = Callable[[str], None]


def quiet(_: str) -> None:
    pass


def build_once(
    target: Path, what: str, build: Callable[[Path, Path], None], report: Report = quiet
) -> Path:
    """`target`, built first unless it exists: `build(root, staged)` writes the binary to
    `staged`, moved to `target` once whole (`root` is the version's cache folder)."""
    if target.exists():
        return target
    root = target.parent.parent
    with _build_lock(root):
        if target.exists():  # built by another process while we waited for the lock
            return target
        report(f"building {what} into {target}")
        started = time.monotonic()
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = target.with_name(f".{target.name}.new")
        build(root, staged)
        staged.replace(target)
        report(f"  {what}: built in {time.monotonic() - started:.0f}s")
    return target


def build_go_tool(binary: GoBinary, target: Path, *, reports: str, report: Report = quiet) -> Path:
    """`binary` built into `target` once; the build is refused unless the binary's
    version output (`binary.version_argv`) contains `reports`."""

    def build(root: Path, staged: Path) -> None:
        _prepare_module(binary, load_versions(), root / "src")
        _compile(binary, root / "src", staged, report)
        result = subprocess.run(
            [str(staged), *binary.version_argv],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        output = result.stdout + result.stderr
        if result.returncode != 0 or reports not in output:
            raise LocalStackError(f"{staged} does not report {reports!r}: {output.strip()!r}")

    what = f"{binary.name} ({binary.package} {binary.version})"
    return build_once(target, what, build, report)
