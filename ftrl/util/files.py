"""Crash-safe file writes: write a temp file, fsync it, rename it over, fsync the dir."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def fsync_dir(path: str | Path) -> None:
    """fsync a directory so a rename in it survives power loss."""
    fd = os.open(str(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes, mode: int = 0o644, sync_dir: bool = True) -> None:
    """Replace `path` with `data` so readers see the old or the new file, never a torn one.
    `sync_dir=False` skips the directory's fsync: a power loss may then undo the rename
    (the old file stays, whole), for files rewritten so often that the old one will do."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync_dir:
        fsync_dir(path.parent)


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Atomically write `obj` as pretty JSON."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())
