"""Actor log files: an actor process rotates its own log; a worker tails and follows them
across rotations and refuses anything but an actor's name."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time

import pytest

from ftrl.wire.errors import InvalidArgumentError
from ftrl.worker.logs import follow_file, log_file, rotate_file, tail_bytes


def test_rotation_in_a_process_keeps_backups_bounded(tmp_path):
    """A process whose fds 1 and 2 go to its log writes 40x max_bytes: at most `backups`
    rotated files are kept, each about max_bytes, and the newest lines are in x.log."""
    path = tmp_path / "a_b.log"
    script = textwrap.dedent(f"""
        import sys, threading, time
        from pathlib import Path
        from ftrl.worker.logs import redirect_output, rotate_own_output
        path = Path({str(path)!r})
        redirect_output(path)
        rotate_own_output(path, 20_000, 2, threading.Event(), check_s=0.01)
        for i in range(4000):
            print(f"line {{i:06d}} " + "x" * 180, flush=True)
            if i % 100 == 0:
                time.sleep(0.02)
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
