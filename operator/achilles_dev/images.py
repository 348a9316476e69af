"""Build the real node's images here, without Docker and without a registry.

Four images, built with podman into a store of our own under `~/.cache/achilles/images`:

* the **local base**: a Debian (`versions.toml`) bootstrapped with `debootstrap
  --variant=minbase` and imported with `podman import`, tagged as the `python:3.11-slim`
  the Dockerfiles start from. It is the only image that carries this machine's CA bundle
  (outbound TLS may be intercepted here, and the Dockerfiles' builds fetch packages);
  nothing the project ships is built with it except locally.
* the **uv image** the engine's Dockerfile copies `uv` from, made from the same uv
  release's binary (this machine's, or the wheel from PyPI).
* the **pause image**: `build/pause/linux/pause.c` of the pinned Kubernetes release,
  compiled statically, the pod sandbox's only process.
* the **engine and runner images**: the project's own `Dockerfile` and
  `runner_image/Dockerfile`, built with `podman build --pull=never` and podman's layer
  cache, so an edit of the sources rebuilds only the layers below the `COPY` of them.

Each image is labelled with a key of what it was made from; a warm build finds the keys
current and only re-runs `podman build`, whose cached layers make it take seconds.
Loading the images into a node's containerd is `achilles_dev.node.images`' job.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from achilles.errors import LocalStackError
from achilles_dev.versions import Versions, cache_root, load_versions

Report = Callable[[str], None]

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
LOCAL_TAG = "dev"
ENGINE_IMAGE = f"localhost/achilles/achilles-agent-engine:{LOCAL_TAG}"
RUNNER_IMAGE = f"localhost/achilles/achilles-runner:{LOCAL_TAG}"
BASE_IMAGE = "localhost/achilles/debian-python"
PAUSE_REPOSITORY = "localhost/achilles/pause"
_KEY_LABEL = "dev.achilles.key"
# Bump when the way an image is made changes, so cached ones are rebuilt.
_RECIPE = "1"
_BASE_PACKAGES = ("python3", "python3-pip", "python-is-python3", "ca-certificates")
_HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
_DEFAULT_MIRROR = "http://deb.debian.org/debian"
_BUILD_PROGRESS = re.compile(r"(\[\d+/\d+\] )?STEP |--> Using cache|Successfully tagged")
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _print(line: str) -> None:
    print(line, flush=True)


@dataclass(frozen=True)
class LocalImages:
    """The names the node and the chart use for what `ensure_images` built."""

    engine: str
    runner: str
    pause: str

    def all(self) -> tuple[str, ...]:
        return (self.pause, self.engine, self.runner)


def images_root() -> Path:
    return cache_root() / "images"


# --- podman --------------------------------------------------------------------------------


def _ulimits() -> list[str]:
    """Explicit rlimits for build containers, never above this process's own.

    Left to itself, podman raises them, which needs CAP_SYS_RESOURCE, which a VM's root
    may lack (runc then fails with "error setting rlimit type 6").
    """
    flags = []
    for name, which, wanted in (
        ("nofile", resource.RLIMIT_NOFILE, 20000),
        ("nproc", resource.RLIMIT_NPROC, 32768),
    ):
        soft, _ = resource.getrlimit(which)
        value = wanted if soft == resource.RLIM_INFINITY else min(wanted, soft)
        flags += ["--ulimit", f"{name}={value}:{value}"]
    return flags


def _podman_conf(root: Path) -> Path:
    """containers.conf for our podman: runc (crun refuses hybrid cgroup v1), cgroupfs."""
    conf = root / "containers.conf"
    text = '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n'
    if not conf.exists() or conf.read_text() != text:
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(text)
    return conf


def podman_argv(*args: str) -> list[str]:
    """`podman` on our own store (`--root`/`--runroot`), with our containers.conf."""
    podman = shutil.which("podman")
    if podman is None:
        raise LocalStackError(
            "podman is needed to build the images: apt-get install podman runc buildah"
        )
    root = images_root()
    return [
        podman,
        "--root",
        str(root / "storage"),
        "--runroot",
        str(root / "run"),
        "--storage-driver",
        "overlay",
        *args,
    ]


def podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(_podman_conf(images_root()))}


def podman(*args: str, stdin: bytes | None = None) -> str:
    try:
        done = subprocess.run(
            podman_argv(*args), env=podman_env(), input=stdin, capture_output=True, check=False
        )
    except OSError as error:
        raise LocalStackError(f"cannot run podman: {error}") from error
    if done.returncode != 0:
        raise LocalStackError(
            f"`podman {' '.join(args)}` failed (exit {done.returncode}): "
            f"{done.stderr.decode(errors='replace').strip()}"
        )
    return done.stdout.decode()


def _stream(
    argv: list[str],
    *,
    env: Mapping[str, str],
    what: str,
    report: Report,
    show: Callable[[str], bool],
    stdin: int | None = None,
) -> None:
    """Run `argv`, reporting the lines `show` picks; on failure raise with the output's tail."""
    try:
        process = subprocess.Popen(
            argv,
            env=dict(env),
            stdin=stdin if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
    except OSError as error:
        raise LocalStackError(f"cannot run {argv[0]}: {error}") from error
    assert process.stdout is not None
    tail: list[str] = []
    for raw in process.stdout:
        line = raw.rstrip()
        tail = [*tail[-40:], line]
        if show(line):
            report(f"  {what}: {line[:150]}")
    if process.wait() != 0:
        raise LocalStackError(
            f"{what}: `{' '.join(argv)}` failed (exit {process.returncode}):\n" + "\n".join(tail)
        )


def image_id(name: str) -> str | None:
    """The image's id in our store, or None when it is not there."""
    try:
        return podman("image", "inspect", "--format", "{{.Id}}", name).strip() or None
    except LocalStackError:
        return None


def _label(name: str) -> str | None:
    try:
        value = podman(
            "image", "inspect", "--format", f'{{{{ index .Labels "{_KEY_LABEL}" }}}}', name
        ).strip()
    except LocalStackError:
        return None
    return value if value and value != "<no value>" else None


def _key(*parts: str | bytes) -> str:
    digest = hashlib.sha256(_RECIPE.encode())
    for part in parts:
        digest.update(part if isinstance(part, bytes) else part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def _build(
    context: Path,
    tag: str,
    *,
    what: str,
    report: Report,
    containerfile: Path | None = None,
    build_args: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> None:
    argv = podman_argv("build", "--pull=never", "--network=host", "--layers", *_ulimits())
    argv += ["-t", tag]
    if containerfile is not None:
        argv += ["-f", str(containerfile)]
    for name, value in (build_args or {}).items():
        argv += ["--build-arg", f"{name}={value}"]
    for name, value in (labels or {}).items():
        argv += ["--label", f"{name}={value}"]
    argv.append(str(context))
    _stream(
        argv,
        env=podman_env(),
        what=what,
        report=report,
        show=lambda line: bool(_BUILD_PROGRESS.match(line)),
    )


# --- the local base image ------------------------------------------------------------------


def debian_mirror(sources: Iterable[Path] | None = None) -> str:
    """The Debian mirror apt uses on this machine (the first main archive it lists)."""
    if sources is None:
        apt = Path("/etc/apt")
        sources = [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] == "URIs:" and "security" not in words[1]:
                return words[1]
            if len(words) >= 3 and words[0] == "deb" and "security" not in words[1]:
                url = words[2] if words[1].startswith("[") else words[1]
                if url.startswith("http"):
                    return url
    return _DEFAULT_MIRROR


def _python_base_tags() -> list[str]:
    """The `FROM` images of the Dockerfiles that are not built here (python:3.11-slim)."""
    tags = set()
    for dockerfile in (REPOSITORY_ROOT / "Dockerfile",):
        for match in re.finditer(r"^FROM\s+(\S*python\S*)", dockerfile.read_text(), re.M):
            tags.add(match.group(1))
    if not tags:
        raise LocalStackError(f"no python base image named in {REPOSITORY_ROOT / 'Dockerfile'}")
    return sorted(tags | {_qualified(tag) for tag in tags})


def _qualified(name: str) -> str:
    """`python:3.11-slim` -> `docker.io/library/python:3.11-slim`, as Docker resolves it."""
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return name
    return f"docker.io/{name}" if rest else f"docker.io/library/{name}"


def _ensure_base(versions: Versions, report: Report) -> str:
    mirror = debian_mirror()
    ca = _HOST_CA_BUNDLE.read_bytes() if _HOST_CA_BUNDLE.exists() else b""
    key = _key("base", versions.debian, mirror, ",".join(_BASE_PACKAGES), ca)
    tag = f"{BASE_IMAGE}:{versions.debian}"
    aliases = _python_base_tags()
    if _label(tag) == key and all(_label(alias) == key for alias in aliases):
        return tag
    if _label(tag) != key:
        debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
        if not Path(debootstrap).exists():
            raise LocalStackError(
                "debootstrap is needed for the local base image: apt-get install debootstrap"
            )
        report(f"base image: debootstrap {versions.debian} from {mirror} (about 2 minutes, once)")
        started = time.monotonic()
        work = images_root() / "work"
        work.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=work, prefix="rootfs-") as rootfs_name:
            rootfs = Path(rootfs_name)
            _stream(
                [
                    debootstrap,
                    "--variant=minbase",
                    f"--include={','.join(_BASE_PACKAGES)}",
                    versions.debian,
                    str(rootfs),
                    mirror,
                ],
                env=os.environ,
                what="debootstrap",
                report=report,
                show=lambda line: (
                    line.startswith("I: ")
                    and not line.startswith(
                        (
                            "I: Retrieving",
                            "I: Validating",
                            "I: Unpacking",
                            "I: Configuring",
                            "I: Extracting",
                        )
                    )
                ),
            )
            _tailor_rootfs(rootfs, ca)
            tar = subprocess.Popen(
                ["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE
            )
            try:
                _stream(
                    podman_argv(
                        "import",
                        "--change",
                        f"ENV PATH={_PATH}",
                        "--change",
                        "ENV LANG=C.UTF-8",
                        # Only this local substitute trusts the machine's CA bundle.
                        "--change",
                        "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
                        "--change",
                        f"LABEL {_KEY_LABEL}={key}",
                        "--change",
                        'CMD ["python3"]',
                        "-",
                        tag,
                    ),
                    env=podman_env(),
                    what="base image",
                    report=report,
                    show=lambda _line: False,
                    stdin=tar.stdout.fileno() if tar.stdout else None,
                )
            finally:
                if tar.stdout:
                    tar.stdout.close()
                tar.wait()
        report(f"base image: {tag} in {time.monotonic() - started:.0f}s")
    for alias in aliases:
        podman("tag", tag, alias)
        report(f"base image: tagged {alias} (local stand-in, never pushed)")
    return tag


def _tailor_rootfs(rootfs: Path, ca: bytes) -> None:
    """Make the Debian tree behave like python:3.11-slim for a Dockerfile."""
    # `pip install` into the system interpreter, as on the official image.
    for marker in rootfs.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
        marker.unlink()
    if ca:
        (rootfs / "etc/ssl/certs/ca-certificates.crt").write_bytes(ca)
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (rootfs / junk).glob("*"):
            if entry.is_file():
                entry.unlink()


# --- uv and pause --------------------------------------------------------------------------


def _uv_tag() -> str:
    text = (REPOSITORY_ROOT / "Dockerfile").read_text()
    match = re.search(r"--from=(\S*astral-sh/uv:(\S+))", text)
    if match is None:
        raise LocalStackError("the Dockerfile copies uv from no `ghcr.io/astral-sh/uv:X` image")
    return match.group(1)


def _uv_binary(version: str, directory: Path) -> Path:
    """uv `version`'s binary: this machine's if it is that release, else the wheel's."""
    host = shutil.which("uv")
    if host:
        shown = subprocess.run([host, "--version"], capture_output=True, text=True, check=False)
        if shown.stdout.split()[1:2] == [version]:
            return Path(host)
    wheels = directory / "wheel"
    subprocess.run(
        [
            "python3",
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(wheels),
            f"uv=={version}",
        ],
        check=True,
    )
    import zipfile

    for wheel in wheels.glob("uv-*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            member = next(n for n in archive.namelist() if n.endswith("/scripts/uv"))
            target = directory / "uv"
            target.write_bytes(archive.read(member))
            target.chmod(0o755)
            return target
    raise LocalStackError(f"no uv {version} wheel downloaded into {wheels}")


def _ensure_uv(report: Report) -> str:
    tag = _uv_tag()
    version = tag.rsplit(":", 1)[1]
    key = _key("uv", version)
    if _label(tag) == key:
        return tag
    with tempfile.TemporaryDirectory(prefix="uv-image-") as work:
        context = Path(work)
        shutil.copy2(_uv_binary(version, context), context / "uv-binary")
        (context / "Containerfile").write_text("FROM scratch\nCOPY uv-binary /uv\n")
        _build(context, tag, what="uv image", report=report, labels={_KEY_LABEL: key})
    report(f"uv image: {tag}")
    return tag


def kubernetes_source(versions: Versions) -> Path:
    """The pinned k8s.io/kubernetes module's source tree (Go's module cache)."""
    from achilles_dev.build import module_source

    return module_source("k8s.io/kubernetes", versions.kubernetes)


def _pause_version(source: Path) -> str:
    match = re.search(r"^TAG \?= (\S+)", (source / "build/pause/Makefile").read_text(), re.M)
    if match is None:
        raise LocalStackError(f"no TAG in {source / 'build/pause/Makefile'}")
    return match.group(1)


def _ensure_pause(versions: Versions, report: Report) -> str:
    source = kubernetes_source(versions)
    version = _pause_version(source)
    tag = f"{PAUSE_REPOSITORY}:{version}"
    pause_c = (source / "build/pause/linux/pause.c").read_bytes()
    key = _key("pause", version, pause_c)
    if _label(tag) == key:
        return tag
    gcc = shutil.which("gcc")
    if gcc is None:
        raise LocalStackError("gcc is needed to compile the pause container: apt-get install gcc")
    with tempfile.TemporaryDirectory(prefix="pause-image-") as work:
        context = Path(work)
        (context / "pause.c").write_bytes(pause_c)
        subprocess.run(
            [
                gcc,
                "-Os",
                "-Wall",
                "-Werror",
                "-static",
                f"-DVERSION=v{version}-achilles",
                "-o",
                str(context / "pause"),
                str(context / "pause.c"),
            ],
            check=True,
        )
        (context / "Containerfile").write_text(
            'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n'
        )
        _build(context, tag, what="pause image", report=report, labels={_KEY_LABEL: key})
    report(f"pause image: {tag} (from Kubernetes {versions.kubernetes}'s pause.c)")
    return tag


def local_images(versions: Versions | None = None) -> LocalImages:
    """The names of the images `ensure_images` builds (without building anything)."""
    versions = versions or load_versions()
    return LocalImages(
        engine=ENGINE_IMAGE,
        runner=RUNNER_IMAGE,
        pause=f"{PAUSE_REPOSITORY}:{_pause_version(kubernetes_source(versions))}",
    )


def ensure_images(versions: Versions | None = None, *, report: Report = _print) -> LocalImages:
    """Build (or confirm from podman's cache) the base, uv, pause, engine and runner images."""
    versions = versions or load_versions()
    if os.geteuid() != 0:
        raise LocalStackError("building the node's images needs root (podman's own store, mounts)")
    with _images_lock():
        return _ensure_images(versions, report)


@contextmanager
def _images_lock() -> Iterator[None]:
    """One build at a time per store (two test sessions, or a test run beside `dev up`)."""
    root = images_root()
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _ensure_images(versions: Versions, report: Report) -> LocalImages:
    started = time.monotonic()
    _ensure_base(versions, report)
    _ensure_uv(report)
    pause = _ensure_pause(versions, report)
    report("engine image: podman build (cached layers are reused)")
    _build(
        REPOSITORY_ROOT,
        ENGINE_IMAGE,
        what="engine image",
        report=report,
        containerfile=REPOSITORY_ROOT / "Dockerfile",
    )
    _build(
        REPOSITORY_ROOT,
        RUNNER_IMAGE,
        what="runner image",
        report=report,
        containerfile=REPOSITORY_ROOT / "runner_image" / "Dockerfile",
        build_args={"ENGINE_IMAGE": ENGINE_IMAGE},
    )
    elapsed = time.monotonic() - started
    report(f"images ready in {elapsed:.0f}s: {ENGINE_IMAGE}, {RUNNER_IMAGE}, {pause}")
    return LocalImages(engine=ENGINE_IMAGE, runner=RUNNER_IMAGE, pause=pause)
