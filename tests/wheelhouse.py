"""An offline wheelhouse for `pre-commit try-repo`, built from the distributions this test environment already has.

pre-commit installs a `language: python` hook by creating a virtualenv and running `pip install .` in the hook
repository, which needs the build backend (hatchling) and every runtime dependency. Tests run without network, so
the test points pip at a folder of wheels (PIP_NO_INDEX / PIP_FIND_LINKS) made here by re-packing the installed
distributions: each wheel holds exactly the files the distribution's RECORD lists under site-packages, with a fresh
RECORD. Wheels are tagged with a tag of the running interpreter (the one the hook's virtualenv is created from).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.tags import sys_tags
from packaging.utils import canonicalize_name

# Written by the installer, not part of a wheel.
INSTALL_ONLY = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"}


def closure(requirements: Iterable[str]) -> list[md.Distribution]:
    """The installed distributions that `requirements` need, transitively (markers evaluated, extras ignored)."""
    seen: dict[str, md.Distribution] = {}
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            raise RuntimeError(f"{req.name} is needed by the hook but not installed in the test environment") from None
        seen[name] = dist
        todo += [Requirement(r) for r in dist.requires or ()]
    return sorted(seen.values(), key=lambda d: canonicalize_name(d.metadata["Name"]))


def _wheel_tag(dist: md.Distribution) -> str:
    ours = {str(t) for t in sys_tags()}
    tags = [
        line.split(":", 1)[1].strip()
        for line in (dist.read_text("WHEEL") or "").splitlines()
        if line.startswith("Tag:")
    ]
    for tag in tags:
        if tag in ours:
            return tag
    return "py3-none-any"  # installed from an sdist: pure Python for this interpreter


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def repack(dist: md.Distribution, dest: Path) -> Path:
    """Write one installed distribution as a wheel in `dest`."""
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    version = dist.version
    info_dir = next(str(f).split("/", 1)[0] for f in dist.files or () if str(f).split("/", 1)[0].endswith(".dist-info"))
    path = dest / f"{name}-{version}-{_wheel_tag(dist)}.whl"
    record: list[str] = []
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as whl:
        for file in dist.files or ():
            rel = str(file)
            if rel.startswith("..") or "__pycache__" in rel or rel.endswith(".pyc"):
                continue  # scripts and data outside site-packages: the installer regenerates entry points
            if rel.startswith(info_dir + "/") and rel.split("/", 1)[1] in INSTALL_ONLY:
                continue
            source = Path(dist.locate_file(file))
            if not source.is_file():
                continue
            data = source.read_bytes()
            whl.writestr(rel, data)
            record.append(f"{rel},{_record_hash(data)},{len(data)}")
        record.append(f"{info_dir}/RECORD,,")
        whl.writestr(f"{info_dir}/RECORD", "\n".join(record) + "\n")
    return path


def build(dest: Path, requirements: Iterable[str]) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    return [repack(d, dest) for d in closure(requirements)]
