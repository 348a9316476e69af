"""Build the dev and test OpenID Provider (`oidc_provider/`, a small Go main) once.

The provider is zitadel/oidc's example OP, imported from the Go module proxy at the
version `versions.toml` pins (`[oidc-provider] zitadel-oidc`), with our users, clients
and access tokens (see oidc_provider/main.go). Its binary is cached under
`~/.cache/achilles/oidc-provider-<version>-<source digest>/bin/oidc-provider` (or
`$ACHILLES_CACHE_DIR`): built once per version and source, reused by every `achilles dev
up` and every test session on the machine. A file lock keeps two builds (two pytest
sessions on a fresh machine) from racing; the loser finds the binary built.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from achilles.errors import LocalStackError
from achilles_dev.build import go_binary
from achilles_dev.versions import cache_root, oidc_provider_version

SOURCE_DIR = Path(__file__).with_name("oidc_provider")
BINARY_NAME = "oidc-provider"
_MODULE = "github.com/zitadel/oidc/v3"
_SOURCES = ("go.mod", "go.sum", "main.go", "store.go")

Report = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def _source_digest() -> str:
    digest = hashlib.sha256()
    for name in _SOURCES:
        digest.update(name.encode() + b"\0" + (SOURCE_DIR / name).read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def _check_go_mod(version: str) -> None:
    """go.mod must require the version versions.toml pins: one version, stated twice."""
    wanted = f"{_MODULE} {version}"
    lines = [line.strip() for line in (SOURCE_DIR / "go.mod").read_text().splitlines()]
    if not any(line == wanted or line.startswith(f"require {wanted}") for line in lines):
        raise LocalStackError(
            f"{SOURCE_DIR / 'go.mod'} does not require {wanted} as versions.toml pins; run "
            f"`go get {_MODULE}@{version} && go mod tidy` in {SOURCE_DIR}"
        )


def binary_path() -> Path:
    """Where the provider of the pinned version and the current source is (or goes)."""
    version = oidc_provider_version()
    return cache_root() / f"{BINARY_NAME}-{version}-{_source_digest()}" / "bin" / BINARY_NAME


def ensure_provider_built(*, report: Report = _quiet) -> Path:
    """The provider's binary, built first if this version and source never were."""
    version = oidc_provider_version()
    _check_go_mod(version)
    target = binary_path()
    if target.exists():
        return target
    root = target.parent.parent
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():  # another process built it while we waited for the lock
            return target
        report(f"building the OIDC provider ({_MODULE} {version}) into {target}")
        started = time.monotonic()
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        result = subprocess.run(
            [go_binary(), "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w",
             "-o", str(tmp), "."],
            cwd=SOURCE_DIR,
            env=_go_env(),
            capture_output=True,
            text=True,
            check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise LocalStackError(
                f"building the OIDC provider in {SOURCE_DIR} failed (exit {result.returncode}):\n"
                f"{(result.stderr or result.stdout).strip()}"
            )
        tmp.replace(target)
        report(f"OIDC provider built in {time.monotonic() - started:.0f}s")
    return target


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"
    # go.sum is committed: never let the build rewrite go.mod/go.sum in the checkout.
    env["GOFLAGS"] = "-mod=readonly"
    return env
