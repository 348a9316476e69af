"""Which control-plane components the local stack uses, and where their binaries live.

`versions.toml` next to this module is the single source of the pinned versions; the
build (`achilles dev build`) and the stack both read it through here, so a bump in one
place moves everything. Binaries are cached per Kubernetes version under
`~/.cache/achilles/k8s-<version>/bin` (or `$ACHILLES_CACHE_DIR`), shared by every
checkout and every test run on the machine.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from achilles.errors import LocalStackError

_VERSIONS_FILE = Path(__file__).with_name("versions.toml")


@dataclass(frozen=True)
class Versions:
    kubernetes: str
    etcd: str
    helm: str
    containerd: str
    cri_tools: str
    debian: str

    @property
    def kubernetes_staging(self) -> str:
        """The v0.X.Y tag of k8s.io/* staging modules matching Kubernetes v1.X.Y."""
        major, _, rest = self.kubernetes.lstrip("v").partition(".")
        if major != "1" or not rest:
            raise LocalStackError(
                f"{_VERSIONS_FILE}: kubernetes.version must look like v1.X.Y, "
                f"got {self.kubernetes!r}"
            )
        return f"v0.{rest}"


def load_versions(path: Path = _VERSIONS_FILE) -> Versions:
    try:
        data = tomllib.loads(path.read_text())
        return Versions(
            kubernetes=str(data["kubernetes"]["version"]),
            etcd=str(data["etcd"]["version"]),
            helm=str(data["helm"]["version"]),
            containerd=str(data["containerd"]["version"]),
            cri_tools=str(data["cri-tools"]["version"]),
            debian=str(data["base-image"]["debian"]),
        )
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as error:
        raise LocalStackError(f"cannot read component versions from {path}: {error}") from error


def oidc_provider_version(path: Path = _VERSIONS_FILE) -> str:
    """The pinned github.com/zitadel/oidc/v3 version of the dev OpenID Provider."""
    try:
        return str(tomllib.loads(path.read_text())["oidc-provider"]["zitadel-oidc"])
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as error:
        raise LocalStackError(
            f"cannot read the OIDC provider's version from {path}: {error}"
        ) from error


def prometheus_version(path: Path = _VERSIONS_FILE) -> str:
    """The pinned github.com/prometheus/prometheus module version (promtool's)."""
    try:
        return str(tomllib.loads(path.read_text())["prometheus"]["version"])
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as error:
        raise LocalStackError(f"cannot read Prometheus' version from {path}: {error}") from error


def jaeger_version(path: Path = _VERSIONS_FILE) -> str:
    """The pinned github.com/jaegertracing/jaeger module version (the trace tests')."""
    try:
        return str(tomllib.loads(path.read_text())["jaeger"]["version"])
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as error:
        raise LocalStackError(f"cannot read Jaeger's version from {path}: {error}") from error


def kind_version(path: Path = _VERSIONS_FILE) -> str:
    """The pinned sigs.k8s.io/kind module version (the cluster tier's kind path)."""
    try:
        return str(tomllib.loads(path.read_text())["kind"]["version"])
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as error:
        raise LocalStackError(f"cannot read kind's version from {path}: {error}") from error


def coredns_version(path: Path = _VERSIONS_FILE) -> str:
    """The pinned github.com/coredns/coredns module version (the kind node's DNS)."""
    try:
        return str(tomllib.loads(path.read_text())["coredns"]["version"])
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as error:
        raise LocalStackError(f"cannot read CoreDNS' version from {path}: {error}") from error


def cache_root() -> Path:
    override = os.environ.get("ACHILLES_CACHE_DIR")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "achilles"


def build_root(versions: Versions | None = None) -> Path:
    """Everything built for one Kubernetes version: `bin/`, the throwaway Go modules."""
    versions = versions or load_versions()
    return cache_root() / f"k8s-{versions.kubernetes}"


def bin_dir(versions: Versions | None = None) -> Path:
    return build_root(versions) / "bin"


# The control plane, which every stack runs.
CONTROL_PLANE_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "helm",
)
# The real node: kubelet, kube-proxy and the container runtime (runc is the distribution's).
NODE_BINARIES = (
    "kubelet",
    "kube-proxy",
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "crictl",
)
BINARIES = CONTROL_PLANE_BINARIES + NODE_BINARIES
