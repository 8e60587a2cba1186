"""Atomic, checksummed checkpoints that never unpickle anything.

A checkpoint is one file DIR/checkpoints/checkpoint_<iteration:08d>.ftrl:

    b"FTRLCKP1" | sha256(payload) (32 bytes) | u64 payload length | payload

where the payload is `ftrl.wire.codec` msgpack (plain types + numpy arrays: model and
optimizer tensors as arrays). Files are written with tmp + fsync + rename, so a reader
sees a whole checkpoint or none; a torn or corrupted file fails the length or
checksum test and is skipped (with a warning) by `load_latest`.
"""

from __future__ import annotations

import hashlib
import logging
import re
import struct
from pathlib import Path
from typing import Any

from ftrl.util.files import atomic_write_bytes
from ftrl.wire import codec

log = logging.getLogger(__name__)

MAGIC = b"FTRLCKP1"
_HEADER = struct.Struct("<8s32sQ")
_NAME = re.compile(r"^checkpoint_(\d{8,})\.ftrl$")


class CorruptCheckpointError(ValueError):
    """The file is not a whole, valid checkpoint."""


def encode_checkpoint(state: dict[str, Any]) -> bytes:
    payload = codec.encode(state)
    return _HEADER.pack(MAGIC, hashlib.sha256(payload).digest(), len(payload)) + payload


def decode_checkpoint(data: bytes) -> dict[str, Any]:
    """Verify and decode; raises CorruptCheckpointError."""
    if len(data) < _HEADER.size:
        raise CorruptCheckpointError(f"file is {len(data)} bytes, shorter than the header")
    magic, digest, length = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptCheckpointError("not an ftrl checkpoint (bad magic)")
    payload = data[_HEADER.size :]
    if len(payload) != length:
        raise CorruptCheckpointError(f"payload is {len(payload)} bytes, header says {length} (torn write?)")
    if hashlib.sha256(payload).digest() != digest:
        raise CorruptCheckpointError("checksum mismatch")
    try:
        state = codec.decode(payload)
    except Exception as e:
        raise CorruptCheckpointError(f"cannot decode payload: {e}") from e
    if not isinstance(state, dict):
        raise CorruptCheckpointError("payload is not a mapping")
    return state


class CheckpointManager:
    """Writes checkpoints under `directory`, keeping the newest `keep`."""

    def __init__(self, directory: str | Path, keep: int = 3):
        self.directory = Path(directory)
        self.keep = keep

    def path_for(self, iteration: int) -> Path:
        return self.directory / f"checkpoint_{iteration:08d}.ftrl"

    def list(self) -> list[tuple[int, Path]]:
        """(iteration, path) of every checkpoint file, oldest first."""
        if not self.directory.is_dir():
            return []
        found = []
        for p in self.directory.iterdir():
            m = _NAME.match(p.name)
            if m and p.is_file():
                found.append((int(m.group(1)), p))
        return sorted(found)

    def save(self, iteration: int, state: dict[str, Any]) -> Path:
        """Atomically write the checkpoint for `iteration`, then prune old ones."""
        path = self.path_for(iteration)
        atomic_write_bytes(path, encode_checkpoint(state))
        for _, old in self.list()[: -self.keep]:
            try:
                old.unlink()
            except FileNotFoundError:
                pass
        return path

    def load_latest(self) -> tuple[dict[str, Any], Path] | None:
        """The newest checkpoint that verifies, skipping corrupt ones with a warning."""
        for _, path in reversed(self.list()):
            try:
                return decode_checkpoint(path.read_bytes()), path
            except (CorruptCheckpointError, OSError) as e:
                log.warning("skipping corrupt checkpoint %s: %s", path, e)
        return None
