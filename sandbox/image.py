"""Build the docker backend's image locally, with no registry: `python -m sandbox build-image`.

Default (`--from host`): a tarball holding the host's Python install (standard library only,
no site-packages, no tests) at /opt/python (or its own path when it lives under /usr) and the
shared libraries it links at their system paths, fed to `docker import`. There is no shell,
no /etc/passwd and no package manager in the image. `--from registry` instead builds
`FROM python:3.11-slim` (needs a reachable registry) and links the host interpreter path to it
so the worker command is the same.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile

from .backends import BASE_PREFIX, BASE_PYTHON, IMAGE, IMAGE_LAYOUT, LABEL, wall_python

SKIP_DIRS = {"test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip", "site-packages",
             "lib2to3", "pydoc_data", "include", "share", "config-3.11-x86_64-linux-gnu"}
SKIP_SUFFIX = (".a", ".exe", ".whl")


def _needed_libs() -> set[str]:
    """Shared objects (and the loader) that python and its extension modules link."""
    dynload = os.path.join(BASE_PREFIX, "lib", f"python{sys.version_info[0]}."
                           f"{sys.version_info[1]}", "lib-dynload")
    objs = [BASE_PYTHON] + [os.path.join(dynload, f) for f in os.listdir(dynload)
                            if f.endswith(".so") and not f.startswith("_tkinter")]
    libs: set[str] = set()
    for obj in objs:
        out = subprocess.run(["ldd", obj], capture_output=True, text=True).stdout
        for m in re.finditer(r"(/\S+\.so[^\s]*)", out):
            libs.add(m.group(1))
    return {p for p in libs if not p.startswith(BASE_PREFIX)}


def _add_path(tar: tarfile.TarFile, path: str) -> None:
    """Add `path` with its parent dirs, following symlinked libraries to real files."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts)):
        d = "/" + "/".join(parts[:i])
        if d.lstrip("/") not in tar.getnames():
            info = tarfile.TarInfo(d.lstrip("/"))
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
    tar.add(os.path.realpath(path), arcname=path.lstrip("/"), recursive=False)


def _filter(info: tarfile.TarInfo):
    parts = set(info.name.split("/"))
    base = info.name.rsplit("/", 1)[-1]
    if parts & SKIP_DIRS or info.name.endswith(SKIP_SUFFIX) or base.startswith("_tkinter"):
        return None
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def build_host_tarball(path: str) -> None:
    with tarfile.open(path, "w") as tar:
        for d in ("tmp", "opt", "opt/sandbox", "proc", "dev", "etc"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        for lib in sorted(_needed_libs()):
            _add_path(tar, lib)
        python, mount = wall_python()
        dest = mount[1] if mount else BASE_PREFIX  # /opt/python: no host path in the image
        parent = os.path.dirname(dest.rstrip("/"))
        if parent != "/" and parent.lstrip("/") not in tar.getnames():
            _add_path(tar, parent)
        tar.add(BASE_PREFIX, arcname=dest.lstrip("/"), filter=_filter)
        info = tarfile.TarInfo("etc/mathrl-sandbox")
        data = f"python={python}\n".encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def build(source: str = "host", tag: str = IMAGE) -> str:
    label = f"LABEL {LABEL}.layout={IMAGE_LAYOUT}"
    python = wall_python()[0]
    if source == "registry":
        dockerfile = (f"FROM python:3.11-slim\nRUN mkdir -p {os.path.dirname(python)} "
                      f"/opt/sandbox && ln -sf /usr/local/bin/python3 {python}\n{label}\n")
        subprocess.run(["docker", "build", "-t", tag, "-"], input=dockerfile.encode(),
                       check=True)
        return tag
    with tempfile.TemporaryDirectory() as tmp:
        tar_path = os.path.join(tmp, "rootfs.tar")
        build_host_tarball(tar_path)
        size = os.path.getsize(tar_path) / 1e6
        print(f"rootfs tarball: {size:.0f} MB from {BASE_PREFIX}", file=sys.stderr)
        with open(tar_path, "rb") as f:
            subprocess.run(["docker", "import", "--change", "WORKDIR /tmp", "--change", label,
                            "-", tag],
                           stdin=f, check=True, stdout=subprocess.DEVNULL)
    return tag
