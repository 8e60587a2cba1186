"""Actor log files: an actor process rotates its own log; a worker tails and follows them
across rotations and refuses anything but an actor's name."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import grpc
import pytest

from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.errors import InvalidArgumentError
from ftrl.wire.grpcopts import channel_options
from ftrl.wire.security import Security, secure_channel
from ftrl.worker.logs import (
    CHUNK_BYTES,
    MAX_TAIL_BYTES,
    follow_file,
    log_file,
    rotate_file,
    start_log_server,
    tail_bytes,
)


def test_rotation_in_a_process_keeps_backups_bounded(tmp_path):
    """A process whose fds 1 and 2 go to its log writes 40x max_bytes: at most `backups`
    rotated files are kept, each about max_bytes, and the newest lines are in x.log."""
    path = tmp_path / "a_b.log"
    script = textwrap.dedent(f"""
        import os, sys, threading, time
        from pathlib import Path
        from ftrl.worker.logs import redirect_output, rotate_own_output
        path = Path({str(path)!r})
        redirect_output(path)
        rotate_own_output(path, 20_000, 2, threading.Event(), check_s=0.01)
        for i in range(4000):
            print(f"line {{i:06d}} " + "x" * 180, flush=True)
            if i % 100 == 0:  # give the rotating thread its turn (a loaded machine)
                deadline = time.monotonic() + 5
                while os.fstat(1).st_size > 20_000 and time.monotonic() < deadline:
                    time.sleep(0.005)
        print("LAST", file=sys.stderr, flush=True)
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["a_b.log", "a_b.log.1", "a_b.log.2"], files
    for name in files:
        assert (tmp_path / name).stat().st_size < 20_000 + 100 * 200, name  # one check's worth
    assert (tmp_path / "a_b.log").read_text().rstrip().endswith("LAST")
    # rotated files hold older lines than the current one, in order
    first = [int((tmp_path / n).read_text().split()[1]) for n in ("a_b.log.2", "a_b.log.1")]
    assert first[0] < first[1]


def test_rotate_file_with_no_backups_truncates(tmp_path):
    path = tmp_path / "x.log"
    path.write_text("old\n")
    rotate_file(path, 0)
    assert path.read_text() == "" and sorted(p.name for p in tmp_path.iterdir()) == ["x.log"]


@pytest.mark.parametrize("name", ["", "a b", "../../etc/passwd", "x\x00y", ".hidden", "a" * 300])
def test_log_file_accepts_only_actor_names(tmp_path, name):
    with pytest.raises(InvalidArgumentError):
        log_file(tmp_path, name)


def test_log_file_of_a_job_actor(tmp_path):
    assert log_file(tmp_path, "job/env_runner/3") == tmp_path / "job_env_runner_3.log"


def test_tail_bytes(tmp_path):
    path = tmp_path / "t.log"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(100_000)))
    data, end = tail_bytes(path, 3)
    assert data == b"line 99997\nline 99998\nline 99999\n" and end == path.stat().st_size
    assert tail_bytes(path, 0) == (b"", end)
    path.write_bytes(b"a\nb\nno newline")
    assert tail_bytes(path, 2)[0] == b"b\nno newline"
    assert tail_bytes(path, -1)[0] == b"a\nb\nno newline"
    assert tail_bytes(path, 10)[0] == b"a\nb\nno newline"


async def test_follow_goes_on_across_a_rotation(tmp_path):
    path = tmp_path / "f.log"
    path.write_bytes(b"before\n")
    got: list[tuple[bytes, bool]] = []

    async def read() -> None:
        async for chunk, rotated in follow_file(path, path.stat().st_size, time.monotonic() + 10):
            got.append((chunk, rotated))
            if b"after" in b"".join(c for c, _ in got):
                return

    def append(data: bytes) -> None:
        with open(path, "ab") as f:
            f.write(data)

    async def write() -> None:
        await asyncio.sleep(0.3)
        append(b"one\n")
        await asyncio.sleep(0.3)
        append(b"two\n")  # the tail of the old file, then the rename
        rotate_file(path, 2)
        append(b"after\n")

    await asyncio.wait_for(asyncio.gather(read(), write()), 15)
    assert b"".join(c for c, _ in got) == b"one\ntwo\nafter\n"
    assert [r for c, r in got if c.startswith(b"after")] == [True]


def test_tail_with_lines_longer_than_a_block(tmp_path):
    path = tmp_path / "long.log"
    big = b"y" * (200 << 10)
    path.write_bytes(b"first\n" + big + b"\nshort\n")
    assert tail_bytes(path, 2)[0] == big + b"\nshort\n"
    assert tail_bytes(path, 1)[0] == b"short\n"
    path.write_bytes(b"z" * (MAX_TAIL_BYTES + 10))  # no newline at all: the last 8 MiB
    assert len(tail_bytes(path, 5)[0]) == MAX_TAIL_BYTES


# ---------------------------------------------------------------- the Worker.ReadLog service

TOKEN = "t0ken-for-log-tests"


@contextlib.asynccontextmanager
async def _log_service(log_dir: Path):
    """A worker's log server on 127.0.0.1 (token required) and a stub with the token."""
    server, port = await start_log_server(log_dir, "127.0.0.1", Security(token=TOKEN))
    channel = secure_channel(f"127.0.0.1:{port}", Security(), channel_options(1 << 20))
    try:
        yield pb_grpc.WorkerStub(channel), port
    finally:
        await channel.close()
        await server.stop(0)


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def _md(token: str = TOKEN) -> tuple[tuple[str, str], ...]:
    return Security(token=token).metadata()


async def _read(stub, **request) -> list[pb.LogChunk]:
    call = stub.ReadLog(pb.ReadLogRequest(**request), metadata=_md(), timeout=10)
    return [chunk async for chunk in call]


@pytest.mark.parametrize("name,code", [
    ("../../etc/passwd", grpc.StatusCode.INVALID_ARGUMENT),
    ("../secret", grpc.StatusCode.INVALID_ARGUMENT),
    ("a b", grpc.StatusCode.INVALID_ARGUMENT),
    ("x\x00y", grpc.StatusCode.INVALID_ARGUMENT),
    (".hidden", grpc.StatusCode.INVALID_ARGUMENT),
    ("", grpc.StatusCode.INVALID_ARGUMENT),
    ("a" * 300, grpc.StatusCode.INVALID_ARGUMENT),
    # valid names: `/` becomes `_`, so they stay inside the log dir (and are not there)
    ("/../secret", grpc.StatusCode.NOT_FOUND),
    ("a/../../secret", grpc.StatusCode.NOT_FOUND),
])
async def test_read_log_refuses_path_tricks(tmp_path, name, code):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (tmp_path / "secret.log").write_text("SECRET\n")
    (tmp_path / "passwd").write_text("SECRET\n")
    async with _log_service(log_dir) as (stub, _):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await _read(stub, name=name, tail_lines=-1)
    assert e.value.code() == code, e.value


async def test_read_log_needs_the_token_and_an_existing_log(tmp_path):
    (tmp_path / "job_a.log").write_text("hello\n")
    async with _log_service(tmp_path) as (stub, _):
        for md in ((), _md("wrong")):
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await stub.ReadLog(pb.ReadLogRequest(name="job/a"), metadata=md, timeout=10).read()
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await _read(stub, name="job/b")
        assert e.value.code() == grpc.StatusCode.NOT_FOUND and "job/b" in e.value.details()
        assert b"".join(c.data for c in await _read(stub, name="job/a", tail_lines=5)) == b"hello\n"


async def test_read_log_tail_in_bounded_chunks_and_resume_from_offset(tmp_path):
    path = tmp_path / "j_big.log"
    path.write_bytes(b"".join(b"%07d %s\n" % (i, b"x" * 991) for i in range(1000)))  # 1000 x 1000 B
    async with _log_service(tmp_path) as (stub, _):
        chunks = await _read(stub, name="j/big", tail_lines=300)
        data = b"".join(c.data for c in chunks)
        assert data.count(b"\n") == 300 and data.startswith(b"0000700 ")
        assert all(len(c.data) <= CHUNK_BYTES for c in chunks) and len(chunks) == 5
        assert chunks[-1].offset == path.stat().st_size
        assert await _read(stub, name="j/big", tail_lines=0) == []
        # a reader that had the first 500 lines resumes exactly there
        chunks = await _read(stub, name="j/big", offset=500_000)
        assert b"".join(c.data for c in chunks).startswith(b"0000500 ") and not chunks[0].rotated
        # an offset past the end: the file was rotated since; the new one from its start
        path.write_bytes(b"new file\n")
        chunks = await _read(stub, name="j/big", offset=500_000)
        assert [(c.data, c.rotated, c.offset) for c in chunks] == [(b"new file\n", True, 9)]


async def test_read_log_follows_across_a_rotation(tmp_path):
    path = tmp_path / "j_f.log"
    path.write_bytes(b"old 1\nold 2\n")
    async with _log_service(tmp_path) as (stub, _):
        call = stub.ReadLog(pb.ReadLogRequest(name="j/f", tail_lines=1, follow=True),
                            metadata=_md(), timeout=20)
        got: list[pb.LogChunk] = []

        async def read() -> None:
            async for chunk in call:
                got.append(chunk)
                if b"after" in b"".join(c.data for c in got):
                    return

        async def write() -> None:
            await asyncio.sleep(0.5)
            _append(path, b"more\n")
            await asyncio.sleep(0.5)
            rotate_file(path, 2)
            path.write_bytes(b"after\n")

        await asyncio.wait_for(asyncio.gather(read(), write()), 15)
        call.cancel()
    assert b"".join(c.data for c in got) == b"old 2\nmore\nafter\n"
    assert [c.rotated for c in got if c.data == b"after\n"] == [True]
    assert got[-1].offset == 6 and (tmp_path / "j_f.log.1").read_bytes().endswith(b"more\n")
