"""Checkpoint files (atomic, checksummed, pruned) and the metrics log."""

from __future__ import annotations

import json
import logging
import math
import shutil

import numpy as np
import pytest

from ftrl.rl.driver.checkpoint import (
    CheckpointManager,
    CorruptCheckpointError,
    decode_checkpoint,
    encode_checkpoint,
)
from ftrl.rl.driver.metrics import EpisodeWindow, MetricsLog, json_safe


def _state(i: int) -> dict:
    return {"iteration": i, "w": np.arange(10, dtype=np.float32) * i, "nested": {"x": [1, 2, None]}}


def test_encode_decode_and_corruption_detection():
    blob = encode_checkpoint(_state(3))
    state = decode_checkpoint(blob)
    assert state["iteration"] == 3
    np.testing.assert_array_equal(state["w"], np.arange(10, dtype=np.float32) * 3)
    flipped = bytearray(blob)
    flipped[-5] ^= 0xFF
    with pytest.raises(CorruptCheckpointError, match="checksum"):
        decode_checkpoint(bytes(flipped))
    with pytest.raises(CorruptCheckpointError, match="torn"):
        decode_checkpoint(blob[:-7])
    with pytest.raises(CorruptCheckpointError, match="magic"):
        decode_checkpoint(b"X" * 60)
    with pytest.raises(CorruptCheckpointError):
        decode_checkpoint(b"")


def test_manager_keeps_last_k_and_skips_corrupt_newest(tmp_path, caplog):
    mgr = CheckpointManager(tmp_path / "checkpoints", keep=2)
    for i in (1, 2, 3):
        mgr.save(i, _state(i))
    assert [i for i, _ in mgr.list()] == [2, 3]
    assert not list((tmp_path / "checkpoints").glob(".*tmp*"))
    state, path = mgr.load_latest()
    assert state["iteration"] == 3
    # tear the newest (as a crash mid-write without atomic rename would)
    path.write_bytes(path.read_bytes()[:20])
    with caplog.at_level(logging.WARNING):
        state, path = mgr.load_latest()
    assert state["iteration"] == 2 and path.name == "checkpoint_00000002.ftrl"
    assert "skipping corrupt checkpoint" in caplog.text
    path.write_bytes(b"garbage")
    assert mgr.load_latest() is None


def test_episode_window_is_a_window_across_calls():
    w = EpisodeWindow(window=3)
    assert w.stats()["episode_return_mean"] is None
    w.add([1.0, 2.0], [1, 2])
    w.add([3.0, 4.0], [3, 4])
    assert w.stats()["episode_return_mean"] == pytest.approx(3.0)
    assert w.episodes_total == 4
    w2 = EpisodeWindow(window=3)
    w2.set_state(w.get_state())
    assert w2.stats() == w.stats() and w2.episodes_total == 4


def test_metrics_log_appends_and_truncates(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    for i in range(1, 6):
        log.append({"iteration": i, "episode_return_mean": math.nan if i == 1 else float(i), "a": np.float32(1.5)})
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["episode_return_mean"] is None  # NaN -> null
    assert json.loads(lines[0])["a"] == 1.5
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"iteration": 6, "torn')  # a torn last line
    assert log.truncate_after(3) == 3
    assert [r["iteration"] for r in log.read()] == [1, 2, 3]


def test_torn_lines_are_dropped_and_whole_rows_kept(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    assert log.drop_torn_lines() == 0 and log.last() is None  # no file yet
    log.append_many([{"iteration": 1}, {"iteration": 3}, {"iteration": 2}])
    before = path.stat().st_mtime_ns
    assert log.drop_torn_lines() == 0 and path.stat().st_mtime_ns == before  # a whole file is left as is
    with path.open("a") as f:
        f.write('{"iteration": 4, "torn')  # a crash in the middle of an append
    assert log.drop_torn_lines() == 1
    assert path.read_text().endswith("}\n") and [r["iteration"] for r in log.read()] == [1, 3, 2]
    assert log.last() == {"iteration": 3}  # the highest iteration, not the last line
    log.append({"iteration": 4})
    assert [r["iteration"] for r in log.read()] == [1, 3, 2, 4]  # appends start on a line of their own


def test_json_safe():
    assert json_safe({"a": [math.inf, np.int64(3)], "b": np.array([1.0, math.nan])}) == {"a": [None, 3], "b": [1.0, None]}


def test_a_kill_during_checkpoint_writes_leaves_whole_checkpoints_or_none(tmp_path):
    """SIGKILL (what follows scancel's SIGTERM after KillWait) at random moments of a
    process writing 8 MB checkpoints back to back: every checkpoint file left decodes,
    and the newest one is the last save that returned."""
    import random
    import signal
    import subprocess
    import sys
    import textwrap
    import time

    script = textwrap.dedent(f"""
        import numpy as np
        from ftrl.rl.driver.checkpoint import CheckpointManager
        mgr = CheckpointManager({str(tmp_path / "checkpoints")!r}, keep=2)
        blob = np.random.default_rng(0).standard_normal(1 << 20)  # 8 MB
        for i in range(1, 10_000):
            mgr.save(i, {{"iteration": i, "weights": blob}})
            print(i, flush=True)
    """)
    rng = random.Random(7)
    for _ in range(4):
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        proc.stdout.readline()  # the first save is done: the process is in its loop
        time.sleep(rng.uniform(0.0, 0.3))
        proc.send_signal(signal.SIGKILL)
        done = [int(line) for line in proc.stdout.read().split()]
        proc.wait(10)
        mgr = CheckpointManager(tmp_path / "checkpoints", keep=2)
        for _, path in mgr.list():
            decode_checkpoint(path.read_bytes())  # whole, or it would not be listed
        state, _ = mgr.load_latest()
        assert state["iteration"] >= max(done, default=1)
        shutil.rmtree(tmp_path / "checkpoints")
