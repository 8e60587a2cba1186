"""The driver's per-iteration state (ftrl.rl.driver.state_writer, ftrl.rl.driver.state): written
off the training path in the order state, row, report; a resumed driver counts what
restarted while it was away once, and takes a newer observation filter from its runners."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from ftrl.config import PPOConfig
from ftrl.rl.driver.checkpoint import decode_checkpoint
from ftrl.rl.driver.metrics import MetricsLog
from ftrl.rl.driver.state_writer import DRIVER_STATE_FILE, LEARNER_STATE_FILE, StateWriter
from ftrl.rl.learning.learner_group import LearnerGroup
from ftrl.rl.learning.learner_health import LearnerHealth
from ftrl.rl.sampling.runner_set import FailurePolicy, RunnerSet
from tests.local_client import LocalClient


def _state(iteration: int) -> dict:
    return {"iteration": iteration, "payload": np.arange(iteration, dtype=np.float32)}


def test_each_row_is_written_after_its_state_and_reported_after_its_row(tmp_path):
    seen: list[tuple[int, int, int]] = []  # (row, state on disk, rows on disk) when reported

    def on_durable(row: dict) -> None:
        state = decode_checkpoint((tmp_path / DRIVER_STATE_FILE).read_bytes())
        rows = MetricsLog(tmp_path / "metrics.jsonl").read()
        seen.append((row["iteration"], state["iteration"], rows[-1]["iteration"]))

    writer = StateWriter(tmp_path, MetricsLog(tmp_path / "metrics.jsonl"), on_durable=on_durable).start()
    for i in range(1, 51):
        writer.submit(i, _state(i), {"iteration": i}, learner={"version": i, "w": np.ones(3)})
    assert writer.flush(30)
    assert [r for r, _, _ in seen] == list(range(1, 51))  # every row, in order, once
    assert all(state >= row and written >= row for row, state, written in seen)
    assert [r["iteration"] for r in MetricsLog(tmp_path / "metrics.jsonl").read()] == list(range(1, 51))
    assert decode_checkpoint((tmp_path / DRIVER_STATE_FILE).read_bytes())["iteration"] == 50
    assert decode_checkpoint((tmp_path / LEARNER_STATE_FILE).read_bytes())["version"] == 50
    writer.close()


def test_a_slow_disk_skips_states_never_rows_and_never_blocks_submit(tmp_path, monkeypatch):
    from ftrl.rl.driver import state_writer

    gate = threading.Event()
    real = state_writer.atomic_write_bytes

    def slow_write(path, data, **options):
        gate.wait(10)
        real(path, data, **options)

    monkeypatch.setattr(state_writer, "atomic_write_bytes", slow_write)
    writer = StateWriter(tmp_path, MetricsLog(tmp_path / "metrics.jsonl")).start()
    t0 = time.monotonic()
    for i in range(1, 21):
        writer.submit(i, _state(i), {"iteration": i})
    assert time.monotonic() - t0 < 1.0  # the disk is stuck: submit does not wait for it
    assert not (tmp_path / "metrics.jsonl").exists()  # no row before its state
    gate.set()
    assert writer.flush(30)
    assert [r["iteration"] for r in MetricsLog(tmp_path / "metrics.jsonl").read()] == list(range(1, 21))
    assert writer.states_skipped >= 1  # states in between were never written
    assert writer.written_iteration == 20
    writer.close()


def test_a_failed_write_is_logged_and_the_next_state_goes_on(tmp_path, monkeypatch, caplog):
    from ftrl.rl.driver import state_writer
    from tests.cluster import wait_until

    real = state_writer.atomic_write_bytes
    disk_full = threading.Event()

    def flaky(path, data, **options):
        if disk_full.is_set():
            disk_full.clear()  # this write fails, the next ones go through
            raise OSError(28, "No space left on device")
        real(path, data, **options)

    monkeypatch.setattr(state_writer, "atomic_write_bytes", flaky)
    writer = StateWriter(tmp_path, MetricsLog(tmp_path / "metrics.jsonl")).start()
    writer.submit(1, _state(1), {"iteration": 1})
    assert writer.flush(30)  # a write that went through before the failure
    disk_full.set()
    writer.submit(2, _state(2), {"iteration": 2})
    wait_until(lambda: writer.failures == 1, 10, what="the failed write")
    writer.submit(3, _state(3), {"iteration": 3})
    assert writer.flush(30)  # tried again (after its pause) with the newest state
    assert "No space left" in caplog.text and writer.failures == 1
    assert decode_checkpoint((tmp_path / DRIVER_STATE_FILE).read_bytes())["iteration"] == 3
    # the row of the failed write was kept, and waited for a state at least as new
    assert [r["iteration"] for r in MetricsLog(tmp_path / "metrics.jsonl").read()] == [1, 2, 3]
    writer.close()


def test_a_row_append_that_fails_after_writing_leaves_no_row_and_no_torn_line(tmp_path, monkeypatch):
    """A full disk can fail the fsync (or a write half way) after bytes reached the file:
    the append is cut back off, so the writer's retry neither repeats a row nor leaves a
    torn line in the middle of metrics.jsonl."""
    from ftrl.rl.driver import metrics
    from tests.cluster import wait_until

    real_fsync = metrics.os.fsync
    disk_full = threading.Event()

    def flaky_fsync(fd):
        if disk_full.is_set() and metrics.os.readlink(f"/proc/self/fd/{fd}").endswith("metrics.jsonl"):
            disk_full.clear()
            raise OSError(28, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(metrics.os, "fsync", flaky_fsync)
    log = MetricsLog(tmp_path / "metrics.jsonl")
    writer = StateWriter(tmp_path, log).start()
    writer.submit(1, _state(1), {"iteration": 1})
    assert writer.flush(30)
    disk_full.set()  # the append of row 2 writes its bytes, then its fsync fails
    writer.submit(2, _state(2), {"iteration": 2})
    wait_until(lambda: writer.failures == 1, 10, what="the failed append")
    writer.submit(3, _state(3), {"iteration": 3})
    assert writer.flush(30)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2, 3]
    writer.close()


def test_a_learner_state_that_must_be_fetched_goes_after_the_row(tmp_path):
    order: list[str] = []
    writer = StateWriter(tmp_path, MetricsLog(tmp_path / "metrics.jsonl"),
                         on_durable=lambda row: order.append("reported")).start()

    def fetch() -> dict:
        order.append("fetched")
        return {"version": 7, "w": np.zeros(4)}

    writer.submit(7, _state(7), {"iteration": 7}, learner=fetch)
    assert writer.flush(10)
    writer.submit(8, _state(8), {"iteration": 8}, learner=lambda: None)  # the learners moved on
    assert writer.flush(10)
    assert order.index("reported") < order.index("fetched")
    assert decode_checkpoint((tmp_path / LEARNER_STATE_FILE).read_bytes())["version"] == 7
    writer.close()
    with pytest.raises(RuntimeError):
        writer.submit(9, _state(9), None)


# --------------------------------------------------------------------------- reconciliation


def _runner_group(incarnations: dict[str, tuple[int, int]]) -> RunnerSet:
    """A runner set `j/env_runner/I` whose runners were created at `incarnations`."""
    policy = FailurePolicy(restart=True, ignore=False, tolerance=3, max_restarts=5, probe_timeout_s=1.0,
                           restore_timeout_s=1.0)
    group = RunnerSet(SimpleNamespace(), group="j/env_runner", kind="env_runner", num_runners=len(incarnations),
                      policy=policy)
    for slot, (name, (inc, restarts)) in zip(group.slots, incarnations.items(), strict=True):
        assert slot.name == name
        slot.handle, slot.incarnation, slot.runtime_restarts = object(), inc, restarts
    return group


def test_runners_restarted_while_the_driver_was_away_count_once_from_the_state():
    saved = [{"name": "j/env_runner/0", "incarnation": 1, "restarts": 0},
             {"name": "j/env_runner/1", "incarnation": 3, "restarts": 2},
             {"name": "j/env_runner/2", "incarnation": 5, "restarts": 4}]
    # runner 0 moved to another node (incarnation 1001, one restart), runner 1 restarted
    # twice in place, runner 2 did not restart
    live = {"j/env_runner/0": (1001, 1), "j/env_runner/1": (5, 4), "j/env_runner/2": (5, 4)}
    for _ in range(2):  # a driver killed before it wrote a state reconciles from the same one
        group = _runner_group(live)
        assert group.reconcile(saved) == 3
        assert (group.num_env_runner_restarts, group.num_env_runner_failures) == (3, 3)
    assert group.known_incarnations() == [{"name": n, "incarnation": i, "restarts": r} for n, (i, r) in live.items()]


def test_learners_restarted_while_the_driver_was_away_count_as_restarts_and_failures():
    health = LearnerHealth("j/learner", actor_info=lambda name: {"restarts": 3})
    # learner 0 was re-attached under another incarnation (it moved), learner 1 as it was
    health.remember_previous([{"name": "j/learner/0", "incarnation": 1, "restarts": 0},
                              {"name": "j/learner/1", "incarnation": 2, "restarts": 0}],
                             attached=[("j/learner/0", 1001, 1), ("j/learner/1", 2, 0)])
    assert (health.num_learner_restarts, health.num_learner_failures) == (1, 1)
    # later a restart the driver sees itself: its failed call was counted, the restart is
    health.note_failures({"j/learner/1": RuntimeError("not an FtrlError: not counted")})
    from ftrl.wire.errors import ActorUnavailableError

    health.note_failures({"j/learner/1": ActorUnavailableError("gone")})
    assert health.num_learner_failures == 2
    health.note_view({"members": [{"name": "j/learner/1", "incarnation": 3}], "waiting": []})
    assert (health.num_learner_restarts, health.num_learner_failures) == (4, 4)  # runtime says 3 restarts
    assert {d["name"]: d["incarnation"] for d in health.known_incarnations()} == {"j/learner/0": 1001,
                                                                                  "j/learner/1": 3}
    counters = health.get_counters()
    fresh = LearnerHealth("j/learner", actor_info=lambda name: {})
    fresh.set_counters(counters)
    assert fresh.get_counters() == counters
    row = {"num_learner_restarts": 4, "num_learner_failures": 4, "num_learner_reformations": 2}
    assert LearnerGroup.counters_from_row(row) == {"num_learner_restarts": 4, "num_learner_failures": 4,
                                                   "num_reformations": 2}


def test_a_learner_group_reports_its_incarnations_and_counters_through_its_health():
    """What the driver state reads of a learner group (get_counters, known_incarnations,
    remember_previous) is its LearnerHealth's; re-attached learners are adopted again."""
    from tests.fixtures.digest_inputs import CASES

    config = PPOConfig().environment("CartPole-v1").learners(num_learners=2)
    group = LearnerGroup(SimpleNamespace(actor=lambda name: {"restarts": 0}), config, job_name="j",
                         space_spec=CASES["cartpole"], learner_class="ftrl.rl.algorithms.ppo:PPOLearner")
    for slot, incarnation in zip(group.slots, (1001, 2), strict=True):  # re-attached before the state was read
        slot.handle, slot.incarnation = object(), incarnation
    group.remember_previous([{"name": "j/learner/0", "incarnation": 1, "restarts": 0},
                             {"name": "j/learner/1", "incarnation": 2, "restarts": 0}])
    assert group.get_counters()["num_learner_restarts"] == 1
    assert [d["incarnation"] for d in group.known_incarnations()] == [1001, 2]
    group.set_counters({"num_learner_restarts": 5, "num_reformations": 2})
    assert group.stats()["num_learner_restarts"] == 6 and group.stats()["num_learner_reformations"] == 2
    group.stop(kill=False)


# --------------------------------------------------------------------------- filters


def test_a_lost_state_takes_the_newer_filter_the_runners_were_synced_with(tmp_path):
    cfg = (PPOConfig().environment("CartPole-v1")
           .env_runners(num_env_runners=2, num_envs_per_env_runner=2, rollout_fragment_length=8,
                        observation_filter="MeanStdFilter")
           .training(train_batch_size=32, minibatch_size=32, num_epochs=1)
           .checkpointing(checkpoint_interval=2).debugging(seed=0))
    with LocalClient() as client:
        first = cfg.build(client=client, output_dir=tmp_path, job_name="f")
        for _ in range(3):
            first.train()
        central = first.filter.get_state()["stats"]["n"]
        assert first.flush_state()
        first.env_runner_group.stop(kill=False)  # the driver "dies"; its runners stay up
        (tmp_path / DRIVER_STATE_FILE).unlink()  # and its newest state is lost
        second = cfg.build(client=client, output_dir=tmp_path, resume=True, job_name="f")
        assert second.restored_from.name == "checkpoint_00000002.ftrl"
        assert second.iteration == 3  # the counters of the newest row
        assert second.filter.get_state()["stats"]["n"] == central > 0  # not the checkpoint's
        second.train()
        second.stop()
    rows = [json.loads(x)["iteration"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [1, 2, 3, 4]


def test_an_output_dir_it_cannot_see_resumes_the_counters_from_the_coordinators_record(tmp_path, caplog):
    """A driver restarted on a node whose disk does not hold the job's output (not shared
    storage): the counters go on from the row the coordinator holds; the learner starts
    fresh (with a warning) as nothing holds its state; never iteration 1 again."""
    cfg = (PPOConfig().environment("CartPole-v1")
           .env_runners(num_env_runners=0, num_envs_per_env_runner=2, rollout_fragment_length=16)
           .training(train_batch_size=32, minibatch_size=32, num_epochs=1).debugging(seed=0))
    known = {"iteration": 40, "env_steps_sampled": 1280, "env_steps_trained": 1280, "time_s": 9.5,
             "episodes_total": 77, "weights_version": 40, "num_env_runner_restarts": 3}
    algo = cfg.build(output_dir=tmp_path, resume=True, known_row=known)
    assert "no learner state of version 40" in caplog.text
    assert (algo.iteration, algo.env_steps_sampled, algo.episodes.episodes_total) == (40, 1280, 77)
    result = algo.train()
    assert result["iteration"] == 41 and result["env_steps_sampled"] == 1280 + 32
    assert result["time_s"] >= 9.5
    algo.stop()
    assert [json.loads(x)["iteration"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [41]


def test_a_coordinator_that_does_not_answer_holds_a_resuming_driver_for_its_bound_only():
    """The driver restarts while the coordinator is away (here: a port that takes the
    connection and never speaks, as a SIGSTOPped coordinator does): its question for the
    newest row the coordinator holds gives up after KNOWN_ROW_TIMEOUT_S, and the resume
    goes on from the newest state on disk."""
    import socket

    from ftrl.client.client import Client
    from ftrl.rl.driver.actor import KNOWN_ROW_TIMEOUT_S, AlgorithmDriver
    from ftrl.wire.security import Security

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    client = Client(f"127.0.0.1:{silent.getsockname()[1]}", security=Security())
    try:
        driver = SimpleNamespace(job_client=client, job_name="away")
        t0 = time.monotonic()
        assert AlgorithmDriver._known_row(driver) is None
        assert time.monotonic() - t0 < KNOWN_ROW_TIMEOUT_S + 5
    finally:
        client.close()
        silent.close()
