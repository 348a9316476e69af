"""Podman on a store of our own (`~/.cache/achilles/images`), and what every image build
here shares: the containers.conf and rlimits that work on this kind of VM, builds that
report their progress, and the key label that marks what an image was made from.

Each image is labelled (`KEY_LABEL`) with a key of what it was made from (`image_key`);
a build finds the key current (`labelled_key`) and skips the work. One build at a time
per store (`images_lock`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import resource
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from achilles.errors import LocalStackError
from achilles_dev.versions import cache_root

Report = Callable[[str], None]

KEY_LABEL = "dev.achilles.key"
# Bump when the way an image is made changes, so cached ones are rebuilt.
_RECIPE = "1"
_BUILD_PROGRESS = re.compile(r"(\[\d+/\d+\] )?STEP |--> Using cache|Successfully tagged")


def images_root() -> Path:
    return cache_root() / "images"


def build_ulimits() -> list[str]:
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


def stream_output(
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


def labelled_key(name: str) -> str | None:
    try:
        value = podman(
            "image", "inspect", "--format", f'{{{{ index .Labels "{KEY_LABEL}" }}}}', name
        ).strip()
    except LocalStackError:
        return None
    return value if value and value != "<no value>" else None


def image_key(*parts: str | bytes) -> str:
    digest = hashlib.sha256(_RECIPE.encode())
    for part in parts:
        digest.update(part if isinstance(part, bytes) else part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def build_image(
    context: Path,
    tag: str,
    *,
    what: str,
    report: Report,
    containerfile: Path | None = None,
    build_args: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> None:
    argv = podman_argv("build", "--pull=never", "--network=host", "--layers", *build_ulimits())
    argv += ["-t", tag]
    if containerfile is not None:
        argv += ["-f", str(containerfile)]
    for name, value in (build_args or {}).items():
        argv += ["--build-arg", f"{name}={value}"]
    for name, value in (labels or {}).items():
        argv += ["--label", f"{name}={value}"]
    argv.append(str(context))
    stream_output(
        argv,
        env=podman_env(),
        what=what,
        report=report,
        show=lambda line: bool(_BUILD_PROGRESS.match(line)),
    )


@contextmanager
def images_lock() -> Iterator[None]:
    """One build at a time per store (two test sessions, or a test run beside `dev up`)."""
    root = images_root()
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
