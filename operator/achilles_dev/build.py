"""Build the local stack's binaries from the official sources via the Go module proxy.

There is no binary download here, only Go and its proxy, so we compile the control plane
(etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, helm) and the
real node (kubelet, kube-proxy, containerd with its runc shim and ctr, crictl) ourselves,
the way envtest users would with a source checkout. Each binary is built in a throwaway
Go module that requires the upstream module at the pinned version:

* k8s.io/kubernetes cannot be `go install`ed: its go.mod points the k8s.io/* staging
  modules at `./staging/...` directories, and `replace` directives of a dependency are
  ignored. Our throwaway module re-states them as `k8s.io/X => k8s.io/X v0.Y.Z`.
* etcd's server module has local `replace` directives for the same reason.
* The version variables upstream's Makefiles stamp with `-ldflags -X` are stamped here
  too, so `kube-apiserver --version` and `/version` report the real release.
* containerd is built as its release is, statically, without the btrfs, devmapper and
  zfs snapshotters (they need C libraries); the node uses overlayfs.

A manifest in the bin directory records what was built from which version; a warm run
finds everything current and does nothing. A file lock serialises concurrent builds.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from achilles.errors import LocalStackError
from achilles_dev.versions import NODE_BINARIES, Versions, build_root, load_versions

_MANIFEST = ".built.json"
_PROGRESS_EVERY = 100  # packages between progress lines

Report = Callable[[str], None]


def _print(line: str) -> None:
    print(line, flush=True)


@dataclass(frozen=True)
class GoBinary:
    """One binary: the upstream module that holds it and how upstream stamps its version."""

    name: str
    module: str
    version: str
    package: str
    ldflags: tuple[str, ...]
    version_argv: tuple[str, ...]
    replaces_kubernetes_staging: bool = False
    tags: tuple[str, ...] = ()


def _kubernetes_ldflags(versions: Versions, build_date: str) -> tuple[str, ...]:
    minor = versions.kubernetes.lstrip("v").split(".")[1]
    flags = []
    # component-base feeds the servers' /version; client-go's copy is what kubectl shows.
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {package}.gitVersion={versions.kubernetes}",
            f"-X {package}.gitMajor=1",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
            f"-X {package}.buildDate={build_date}",
        ]
    return tuple(flags)


def components(versions: Versions, kubernetes_release_time: str) -> list[GoBinary]:
    kube = _kubernetes_ldflags(versions, kubernetes_release_time)
    return [
        GoBinary(
            name="etcd",
            module="go.etcd.io/etcd/server/v3",
            version=versions.etcd,
            package="go.etcd.io/etcd/server/v3",
            ldflags=(),  # etcd's version is a constant in its api module
            version_argv=("--version",),
        ),
        *(
            GoBinary(
                name=name,
                module="k8s.io/kubernetes",
                version=versions.kubernetes,
                package=f"k8s.io/kubernetes/cmd/{name}",
                ldflags=kube,
                version_argv=argv,
                replaces_kubernetes_staging=True,
            )
            for name, argv in (
                ("kube-apiserver", ("--version",)),
                ("kube-controller-manager", ("--version",)),
                ("kube-scheduler", ("--version",)),
                ("kubectl", ("version", "--client")),
                ("kubelet", ("--version",)),
                ("kube-proxy", ("--version",)),
            )
        ),
        GoBinary(
            name="helm",
            module="helm.sh/helm/v4",
            version=versions.helm,
            package="helm.sh/helm/v4/cmd/helm",
            ldflags=(
                f"-X helm.sh/helm/v4/internal/version.version={versions.helm}",
                "-X helm.sh/helm/v4/internal/version.gitTreeState=clean",
            ),
            version_argv=("version", "--short"),
        ),
        *(
            GoBinary(
                name=name,
                module="github.com/containerd/containerd/v2",
                version=versions.containerd,
                package=f"github.com/containerd/containerd/v2/cmd/{name}",
                ldflags=(
                    f"-X github.com/containerd/containerd/v2/version.Version={versions.containerd}",
                ),
                version_argv=argv,
                tags=("no_btrfs", "no_devmapper", "no_zfs"),
            )
            for name, argv in (
                ("containerd", ("--version",)),
                ("containerd-shim-runc-v2", ("-v",)),
                ("ctr", ("--version",)),
            )
        ),
        GoBinary(
            name="crictl",
            module="sigs.k8s.io/cri-tools",
            version=versions.cri_tools,
            package="sigs.k8s.io/cri-tools/cmd/crictl",
            ldflags=(f"-X sigs.k8s.io/cri-tools/pkg/version.Version={versions.cri_tools}",),
            version_argv=("--version",),
        ),
    ]


def go_binary() -> str:
    found = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if found is None:
        raise LocalStackError(
            "the Go toolchain is needed to build the control plane: install Go "
            "(https://go.dev/dl/) and put `go` on PATH"
        )
    return found


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"  # static binaries, no C toolchain needed
    env["GOFLAGS"] = "-trimpath -buildvcs=false"
    return env


def _run_go(argv: list[str], cwd: Path) -> str:
    result = subprocess.run(
        [go_binary(), *argv], cwd=cwd, env=_go_env(), capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise LocalStackError(
            f"`go {' '.join(argv)}` in {cwd} failed (exit {result.returncode}):\n"
            f"{(result.stderr or result.stdout).strip()}"
        )
    return result.stdout


def module_source(module: str, version: str) -> Path:
    """An upstream module's source tree in Go's module cache, downloaded first if absent."""
    done = subprocess.run(
        [go_binary(), "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tempfile.gettempdir(),
    )
    try:
        return Path(json.loads(done.stdout)["Dir"])
    except (ValueError, KeyError) as error:
        raise LocalStackError(f"cannot locate {module}@{version}: {done.stderr.strip()}") from error


def _module_info(module: str, version: str, cwd: Path) -> dict[str, str]:
    info: dict[str, str] = json.loads(
        _run_go(["mod", "download", "-json", f"{module}@{version}"], cwd)
    )
    return info


def _staging_modules(kubernetes_go_mod: Path) -> list[str]:
    """Modules k8s.io/kubernetes replaces with its own `./staging/src/...` directories."""
    staging = []
    for line in kubernetes_go_mod.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "=>" and parts[2].startswith("./staging/"):
            staging.append(parts[0])
    if not staging:
        raise LocalStackError(f"no staging replace directives found in {kubernetes_go_mod}")
    return staging


def _prepare_module(binary: GoBinary, versions: Versions, src: Path) -> None:
    """A throwaway module requiring the upstream one, with the replaces it needs."""
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    _run_go(["mod", "init", f"achilles_dev/build/{binary.name}"], src)
    if binary.replaces_kubernetes_staging:
        go_mod = Path(_module_info(binary.module, binary.version, src)["GoMod"])
        for module in _staging_modules(go_mod):
            _run_go(
                ["mod", "edit", f"-replace={module}={module}@{versions.kubernetes_staging}"], src
            )
    _run_go(["get", f"{binary.package}@{binary.version}"], src)


def _compile(binary: GoBinary, src: Path, target: Path, report: Report) -> None:
    tags = ["-tags", ",".join(binary.tags)] if binary.tags else []
    total = len(_run_go(["list", *tags, "-deps", binary.package], src).split())
    tmp = target.with_name(f".{target.name}.tmp")
    argv = [go_binary(), "build", "-v", *tags, "-ldflags", " ".join(("-s", "-w", *binary.ldflags))]
    argv += ["-o", str(tmp), binary.package]
    started = time.monotonic()
    process = subprocess.Popen(
        argv, cwd=src, env=_go_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    tail: list[str] = []
    for compiled, line in enumerate(process.stdout, start=1):
        tail = [*tail[-30:], line.rstrip()]
        if compiled % _PROGRESS_EVERY == 0:
            report(
                f"  {binary.name}: compiled {compiled} packages (of at most {total}), "
                f"{time.monotonic() - started:.0f}s"
            )
    if process.wait() != 0:
        raise LocalStackError(
            f"`{' '.join(argv)}` in {src} failed (exit {process.returncode}):\n" + "\n".join(tail)
        )
    tmp.replace(target)


def _version_output(binary: GoBinary, path: Path) -> str:
    result = subprocess.run(
        [str(path), *binary.version_argv], capture_output=True, text=True, check=False
    )
    output = (result.stdout + result.stderr).strip()
    if result.returncode != 0 or binary.version.lstrip("v") not in output:
        raise LocalStackError(
            f"{path} does not report version {binary.version}: "
            f"exit {result.returncode}, output {output!r}"
        )
    return output.splitlines()[0]


@contextmanager
def _build_lock(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _read_manifest(bin_dir: Path) -> dict[str, str]:
    try:
        manifest: dict[str, str] = json.loads((bin_dir / _MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return manifest


def _is_current(name: str, version: str, bin_dir: Path, manifest: dict[str, str]) -> bool:
    """Built at `version`, per the manifest, and still there."""
    return manifest.get(name) == version and (bin_dir / name).exists()


def missing_binaries(
    versions: Versions | None = None,
    *,
    node: bool = True,
    only: Collection[str] | None = None,
) -> list[str]:
    """Binaries not built at the pinned version (empty when the cache is warm).

    `node=False` leaves out the real node's binaries (a stack without a node);
    `only` limits the question to those binaries (e.g. `{"helm"}` for `make lint`).
    """
    versions = versions or load_versions()
    bin_dir = build_root(versions) / "bin"
    manifest = _read_manifest(bin_dir)
    return [
        name
        for name, version in _pinned(versions, node=node, only=only).items()
        if not _is_current(name, version, bin_dir, manifest)
    ]


def _is_wanted(name: str, *, node: bool, only: Collection[str] | None) -> bool:
    if only is not None:
        return name in only
    return node or name not in NODE_BINARIES


def _pinned(versions: Versions, *, node: bool, only: Collection[str] | None) -> dict[str, str]:
    return {
        binary.name: binary.version
        for binary in components(versions, "")
        if _is_wanted(binary.name, node=node, only=only)
    }


def ensure_built(
    versions: Versions | None = None,
    *,
    force: bool = False,
    node: bool = True,
    only: Collection[str] | None = None,
    report: Report = _print,
) -> Path:
    """Build whatever is missing or outdated (of `only`, when given); return the bin
    directory. Idempotent."""
    versions = versions or load_versions()
    root = build_root(versions)
    bin_dir = root / "bin"
    if only is not None and (unknown := set(only) - {b.name for b in components(versions, "")}):
        raise LocalStackError(f"no such binary to build: {', '.join(sorted(unknown))}")
    if not force and not missing_binaries(versions, node=node, only=only):
        if only is not None:
            report(f"already built: {', '.join(sorted(only))} in {bin_dir}")
            return bin_dir
        report(
            f"already built: {bin_dir} (kubernetes {versions.kubernetes}, "
            f"etcd {versions.etcd}, helm {versions.helm}"
            + (f", containerd {versions.containerd}, crictl {versions.cri_tools})" if node else ")")
        )
        return bin_dir
    with _build_lock(root):
        bin_dir.mkdir(parents=True, exist_ok=True)
        manifest = _read_manifest(bin_dir)
        src_root = root / "src"
        src_root.mkdir(exist_ok=True)
        wanted = {
            b.name
            for b in components(versions, "")
            if _is_wanted(b.name, node=node, only=only)
            and (force or not _is_current(b.name, b.version, bin_dir, manifest))
        }
        # Only Kubernetes' own binaries stamp its release time, and looking it up
        # downloads the whole k8s.io/kubernetes module: not for helm alone.
        release_time = "1970-01-01T00:00:00Z"
        if any(b.replaces_kubernetes_staging for b in components(versions, "") if b.name in wanted):
            release = _module_info("k8s.io/kubernetes", versions.kubernetes, src_root)
            release_time = release.get("Time", release_time)
        todo = [b for b in components(versions, release_time) if b.name in wanted]
        if not todo:  # another process finished the build while we waited for the lock
            report(f"already built: {bin_dir}")
            return bin_dir
        report(
            f"building {', '.join(b.name for b in todo)} into {bin_dir}; "
            "a cold build compiles for tens of minutes"
        )
        for index, binary in enumerate(todo, start=1):
            started = time.monotonic()
            report(f"[{index}/{len(todo)}] {binary.name} {binary.version} from {binary.module}")
            src = src_root / binary.name
            _prepare_module(binary, versions, src)
            _compile(binary, src, bin_dir / binary.name, report)
            shown = _version_output(binary, bin_dir / binary.name)
            manifest[binary.name] = binary.version
            (bin_dir / _MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
            report(f"  {binary.name}: built in {time.monotonic() - started:.0f}s ({shown})")
    return bin_dir


def main() -> None:
    """`python -m achilles_dev.build`: the same build as `achilles dev build`."""
    try:
        ensure_built(force="--force" in sys.argv[1:])
    except LocalStackError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from error


if __name__ == "__main__":
    main()
