"""Per-actor log files: where they live, how they rotate, and how a worker serves them.

Each actor process writes its stdout and stderr (its `logging` output included) to
`LOG_DIR/<name with / as _>.log`. The actor process rotates its own file (`rotate_own_output`):
only it writes there, so a crash traceback always lands in its own file. The worker serves
the files over `Worker.ReadLog` (tail, then follow across rotations), so `ftrl logs` works
for an actor on any node, and for one that died.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO

import grpc

from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.errors import InvalidArgumentError, NotFoundError
from ftrl.wire.limits import check_name
from ftrl.wire.security import Security

log = logging.getLogger(__name__)

CHUNK_BYTES = 64 << 10  # one LogChunk at most
MAX_TAIL_BYTES = 8 << 20  # a tail reads at most this much from the end of a file
MAX_FOLLOW_S = 24 * 3600.0  # a follow ends after this long at most
POLL_S = 0.2  # how often a follow looks for new bytes
RETRIES_MISSING = 4  # a log file missing for less than 3 * POLL_S / 4 is mid-rotation
DEFAULT_MAX_BYTES = 50 << 20
DEFAULT_BACKUPS = 3


def log_file(log_dir: Path, name: str) -> Path:
    """The log file of actor `name` in `log_dir` (a valid actor name, never a path)."""
    check_name(name, "actor name")
    path = log_dir / (name.replace("/", "_") + ".log")
    if path.parent != log_dir or name.startswith(".") or "\x00" in name:
        raise InvalidArgumentError(f"invalid actor name {name!r}")
    return path


def rotate_file(path: Path, backups: int) -> None:
    """Shift `path.1 .. path.(backups-1)` up by one and move `path` to `path.1`."""
    for i in range(backups - 1, 0, -1):
        older = path.with_name(f"{path.name}.{i}")
        if older.exists():
            os.replace(older, path.with_name(f"{path.name}.{i + 1}"))
    if backups > 0 and path.exists():
        os.replace(path, path.with_name(f"{path.name}.1"))
    elif path.exists():
        os.truncate(path, 0)


def redirect_output(path: Path) -> None:
    """Point this process's fds 1 and 2 at `path` (appending)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def rotate_own_output(path: Path, max_bytes: int, backups: int, stop: threading.Event,
                      check_s: float = 1.0) -> threading.Thread:
    """Start a daemon thread that rotates this process's own log (fds 1 and 2 point at
    `path`) whenever it grows past `max_bytes`; it ends when `stop` is set."""

    def check() -> None:
        with contextlib.suppress(OSError):
            if os.fstat(1).st_size > max_bytes:
                rotate_file(path, backups)
                redirect_output(path)

    def loop() -> None:
        while not stop.wait(check_s):
            check()

    check()
    thread = threading.Thread(target=loop, name="ftrl-log-rotate", daemon=True)
    thread.start()
    return thread


def tail_bytes(path: Path, lines: int) -> tuple[bytes, int]:
    """The last `lines` lines of `path` (-1: all of it, up to MAX_TAIL_BYTES) and the
    offset where they end."""
    with open(path, "rb") as f:
        return tail_of(f, lines)


def tail_of(f: BinaryIO, lines: int) -> tuple[bytes, int]:
    """The last `lines` lines of open file `f` (-1: all, up to MAX_TAIL_BYTES; a cut line
    counts as one) and the offset where they end; reads backwards in blocks, once each."""
    size = os.fstat(f.fileno()).st_size
    if lines == 0:
        return b"", size
    start = max(0, size - MAX_TAIL_BYTES)
    if lines < 0:
        f.seek(start)
        return f.read(size - start), size
    blocks: list[bytes] = []
    pos, newlines = size, 0
    while pos > start and newlines <= lines:
        step = min(64 << 10, pos - start)
        pos -= step
        f.seek(pos)
        block = f.read(step)
        blocks.append(block)
        newlines += block.count(b"\n")
    data = b"".join(reversed(blocks))
    parts = data.split(b"\n")
    keep = lines + 1 if data.endswith(b"\n") else lines
    return b"\n".join(parts[-keep:]), size


def read_from(f: BinaryIO, offset: int) -> tuple[bytes, int, int, bool]:
    """What open file `f` holds from byte `offset` on (at most MAX_TAIL_BYTES): (data,
    start, end, rotated). An offset past its end means the file was rotated since (this is
    a new one): read from 0."""
    size = os.fstat(f.fileno()).st_size
    start, rotated = (offset, False) if offset <= size else (0, True)
    f.seek(start)
    data = f.read(min(size - start, MAX_TAIL_BYTES))
    return data, start, start + len(data), rotated


async def follow_file(path: Path, offset: int, until: float,
                      opened: BinaryIO | None = None) -> AsyncIterator[tuple[bytes, bool]]:
    """Yield (bytes, rotated) appended to `path` after `offset` until `until` (monotonic),
    at most CHUNK_BYTES at a time; when the file is rotated (a new file at `path`), finish
    the old one, then go on with the new one from its start. `opened`: `path` already open
    (this takes it over), so a rotation since it was read is not missed."""
    f = opened or open(path, "rb")  # noqa: ASYNC230 (a local file: opening it does not block for long)
    try:
        f.seek(offset)
        inode = os.fstat(f.fileno()).st_ino
        rotated = False
        while time.monotonic() < until:
            data = f.read(CHUNK_BYTES)
            if data:
                yield data, rotated
                rotated = False
                continue
            try:
                current = os.stat(path).st_ino
            except FileNotFoundError:
                current = inode  # between the rename and the new file: wait
            if current != inode:
                # the old file may have grown between the read above and the rename
                while data := f.read(CHUNK_BYTES):
                    yield data, rotated
                    rotated = False
                f.close()
                try:
                    f = open(path, "rb")  # noqa: ASYNC230
                except FileNotFoundError:  # renamed again already: look again next poll
                    f = open(os.devnull, "rb")  # noqa: ASYNC230
                    inode = -1
                    await asyncio.sleep(POLL_S)
                    continue
                inode = os.fstat(f.fileno()).st_ino
                rotated = True
                continue
            await asyncio.sleep(POLL_S)
    finally:
        f.close()


class LogServicer(pb_grpc.WorkerServicer):
    """Serves the actor logs in one worker's log dir."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir

    async def _open(self, path: Path, name: str) -> BinaryIO:
        """Open actor `name`'s log, retried briefly when it is missing for a moment
        (between a rotation's rename and the new file)."""
        for _ in range(RETRIES_MISSING - 1):
            try:
                return await asyncio.to_thread(open, path, "rb")
            except FileNotFoundError:
                await asyncio.sleep(POLL_S / 4)
        try:
            return await asyncio.to_thread(open, path, "rb")
        except FileNotFoundError:
            raise NotFoundError(f"no log of actor {name!r} on this node") from None

    async def ReadLog(self, request: pb.ReadLogRequest, context) -> AsyncIterator[pb.LogChunk]:
        """The last `tail_lines` lines of actor `name`'s log (or its bytes from `offset`),
        then, with `follow`, what is appended, across rotations, until cancelled."""
        try:
            path = log_file(self.log_dir, request.name)
            f = await self._open(path, request.name)
        except (InvalidArgumentError, NotFoundError) as e:
            from ftrl.wire.errors import ERROR_TYPE_KEY, status_of

            code, message = status_of(e)
            context.set_trailing_metadata(((ERROR_TYPE_KEY, type(e).__name__),))
            await context.abort(code, message)
            return
        try:
            if request.offset > 0:  # a reader resuming where it was
                data, start, end, rotated = await asyncio.to_thread(read_from, f, request.offset)
            else:
                lines = max(-1, min(request.tail_lines, 1_000_000))
                data, end = await asyncio.to_thread(tail_of, f, lines)
                start, rotated = end - len(data), False
            for i in range(0, len(data), CHUNK_BYTES):
                part = data[i:i + CHUNK_BYTES]
                yield pb.LogChunk(data=part, rotated=rotated and i == 0, offset=start + i + len(part))
            if not request.follow:
                return
            rotated = rotated and not data
            span = request.max_seconds if 0 < request.max_seconds < MAX_FOLLOW_S else MAX_FOLLOW_S
            pos, following, f = end, f, None
            chunks = follow_file(path, end, time.monotonic() + span, following)
            async with contextlib.aclosing(chunks):  # a cancelled call closes the file now
                async for chunk, new_file in chunks:
                    pos = len(chunk) if new_file else pos + len(chunk)
                    yield pb.LogChunk(data=chunk, rotated=new_file or rotated, offset=pos)
                    rotated = False
        finally:
            if f is not None:
                f.close()


async def start_log_server(log_dir: Path, host: str, security: Security) -> tuple[grpc.aio.Server, int]:
    """Serve `log_dir`'s actor logs (`Worker.ReadLog`) on `host`, any free port, with the
    cluster token and TLS of `security` (as actor servers); returns (server, port)."""
    from ftrl.wire.grpcopts import server_options
    from ftrl.wire.limits import MAX_CONTROL_MESSAGE
    from ftrl.wire.security import bind
    from ftrl.wire.strict import add_servicer

    server = grpc.aio.server(options=server_options(MAX_CONTROL_MESSAGE))
    add_servicer(pb_grpc.add_WorkerServicer_to_server, LogServicer(log_dir), server, token=security.token)
    port = bind(server, f"{host}:0", security)
    await server.start()
    return server, port
