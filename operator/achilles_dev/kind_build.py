"""Build what a kind cluster needs beyond the local stack's binaries, from the Go module proxy.

* **kind** itself (`sigs.k8s.io/kind` at `versions.toml`'s `[kind] version`), as `go
  install` would build it: `~/.cache/achilles/kind-<version>/bin/kind`.
* **kubeadm**, which kind runs inside its node, from the same `k8s.io/kubernetes` release
  and the same throwaway-module build as the control plane (`achilles_dev.build`):
  `~/.cache/achilles/kubeadm-<kubernetes version>/bin/kubeadm`.
* **CoreDNS** (`[coredns] version`), the cluster DNS kubeadm installs: a small main
  (`kind_node/coredns_main.go.txt`) that links only the plugins kubeadm's Corefile uses
  (upstream's own main links some 60, the cloud providers' SDKs among them):
  `~/.cache/achilles/coredns-<version>/bin/coredns`.

Each is built once per version under a file lock (the loser of a race finds it built),
and reused by every node image build and test session on the machine.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from achilles_dev.build import (
    GoBinary,
    _compile,
    _kubernetes_ldflags,
    _module_info,
    _prepare_module,
    _run_go,
    _version_output,
)
from achilles_dev.go_tools import build_go_tool, build_once, quiet
from achilles_dev.versions import cache_root, coredns_version, kind_version, load_versions

Report = Callable[[str], None]

KIND_NODE_DIR = Path(__file__).with_name("kind_node")
_COREDNS_MAIN = KIND_NODE_DIR / "coredns_main.go.txt"


@dataclass(frozen=True)
class KindBinaries:
    kind: Path
    kubeadm: Path
    coredns: Path


def kind_binary_path() -> Path:
    return cache_root() / f"kind-{kind_version()}" / "bin" / "kind"


def kubeadm_binary_path() -> Path:
    return cache_root() / f"kubeadm-{load_versions().kubernetes}" / "bin" / "kubeadm"


def _coredns_source_digest() -> str:
    return hashlib.sha256(_COREDNS_MAIN.read_bytes()).hexdigest()[:12]


def coredns_binary_path() -> Path:
    return (
        cache_root() / f"coredns-{coredns_version()}-{_coredns_source_digest()}" / "bin" / "coredns"
    )


def _ensure_kind(report: Report) -> Path:
    version = kind_version()
    binary = GoBinary(
        name="kind",
        module="sigs.k8s.io/kind",
        version=version,
        package="sigs.k8s.io/kind",
        ldflags=(),  # a release's version is a constant in its source
        version_argv=("version",),
    )

    return build_go_tool(binary, kind_binary_path(), reports=f"kind {version}", report=report)


def _ensure_kubeadm(report: Report) -> Path:
    versions = load_versions()

    def build(root: Path, staged: Path) -> None:
        src = root / "src"
        src.mkdir(parents=True, exist_ok=True)
        release = _module_info("k8s.io/kubernetes", versions.kubernetes, src)
        binary = GoBinary(
            name="kubeadm",
            module="k8s.io/kubernetes",
            version=versions.kubernetes,
            package="k8s.io/kubernetes/cmd/kubeadm",
            ldflags=_kubernetes_ldflags(
                versions, release.get("Time", "1970-01-01T00:00:00Z") or "1970-01-01T00:00:00Z"
            ),
            version_argv=("version", "-o", "short"),
            replaces_kubernetes_staging=True,
        )
        _prepare_module(binary, versions, src / "kubeadm")
        _compile(binary, src / "kubeadm", staged, report)
        _version_output(binary, staged)

    return build_once(kubeadm_binary_path(), f"kubeadm {versions.kubernetes}", build, report)


def _ensure_coredns(report: Report) -> Path:
    version = coredns_version()

    def build(root: Path, staged: Path) -> None:
        src = root / "src"
        if src.exists():
            shutil.rmtree(src)
        src.mkdir(parents=True)
        shutil.copyfile(_COREDNS_MAIN, src / "main.go")
        _run_go(["mod", "init", "achilles_dev/build/coredns"], src)
        _run_go(["get", f"github.com/coredns/coredns@{version}"], src)
        _run_go(["mod", "tidy"], src)
        binary = GoBinary(
            name="coredns",
            module="github.com/coredns/coredns",
            version=version,
            package=".",
            ldflags=(),  # CoreDNS' version is a constant in coremain
            version_argv=("-version",),
        )
        _compile(binary, src, staged, report)
        _version_output(binary, staged)

    return build_once(coredns_binary_path(), f"CoreDNS {version}", build, report)


def ensure_kind_binaries(*, report: Report = quiet) -> KindBinaries:
    """kind, kubeadm and CoreDNS at the pinned versions, built first where missing (cold:
    about 1, 4 and 8 minutes on a busy 2-core machine)."""
    return KindBinaries(
        kind=_ensure_kind(report),
        kubeadm=_ensure_kubeadm(report),
        coredns=_ensure_coredns(report),
    )
