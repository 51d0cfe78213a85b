"""Tar archives of local directories (up) and their safe extraction (down)."""

from __future__ import annotations

import os
import tarfile
from typing import Iterable, Tuple


def pack(local_dir: str, dest: str, names: Iterable[str] = (".",), gzip: bool = False) -> None:
    """Writes ``names`` (relative to ``local_dir``) to the archive ``dest``: files, directories,
    symlinks, modes and times."""
    with tarfile.open(dest, "w:gz" if gzip else "w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            tar.add(os.path.join(local_dir, name), arcname=name, recursive=True)


def extract(archive: str, local_dir: str) -> Tuple[int, int]:
    """Unpacks into ``local_dir`` (created, or merged into); refuses entries that would land outside
    it (absolute names, ``..``, links pointing out, devices). Returns (files, bytes)."""
    root = os.path.realpath(local_dir)
    os.makedirs(root, exist_ok=True)
    files = size = 0
    with tarfile.open(archive, "r:*") as tar:
        members = tar.getmembers()
        for m in members:
            target = os.path.realpath(os.path.join(root, m.name))
            if os.path.isabs(m.name) or (target != root and not target.startswith(root + os.sep)):
                raise ValueError(f"archive entry {m.name!r} would land outside {local_dir}")
            if m.isdev() or m.isfifo():
                raise ValueError(f"archive entry {m.name!r} is a device or pipe")
            if m.issym() or m.islnk():
                link = m.linkname if m.islnk() else os.path.join(os.path.dirname(m.name), m.linkname)
                dest = os.path.realpath(os.path.join(root, link))
                if os.path.isabs(m.linkname) or (dest != root and not dest.startswith(root + os.sep)):
                    raise ValueError(f"archive link {m.name!r} points outside {local_dir}")
            if m.isfile():
                files += 1
                size += m.size
        for m in members:
            tar.extract(m, root, set_attrs=True)
    return files, size
