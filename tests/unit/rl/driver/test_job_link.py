"""JobLink and the driver's job reports against a fake coordinator: reports kept while it
is unreachable, retried at a short fixed interval, and delivered once it answers: the
current state and newest row first, then the older rows in order, bounded, never
blocking training; stop and scale requests from its replies; a drained driver reports no
final stage."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from ftrl.rl.driver.actor import AlgorithmDriver
from ftrl.rl.driver.job_link import JobLink
from ftrl.wire.errors import ActorUnavailableError, FtrlError, FtrlTimeoutError, NotFoundError
from tests.local_client import LocalClient


class FakeCoordinator:
    """`report_job` as the client has it; records every call; fails while `down`."""

    def __init__(self, **info: Any):
        self.calls: list[dict[str, Any]] = []
        self.failed = 0
        self.failed_at: list[float] = []  # monotonic times of the failed calls
        self.failed_batches: list[list[int]] = []  # the iterations of the rows each failed call carried
        self.down = False
        self.fail_next = 0  # calls to fail (as unreachable) even when up
        self.error: type[Exception] | None = None  # raised (when down) instead of "unreachable"
        self.down_after: int | None = None  # goes down after taking the row of this iteration
        self.unknown = False
        self.delay_s = 0.0
        self.info = {"num_env_runners": 0, "num_learners": 0, "stop_requested": False, **info}
        self.lock = threading.Lock()

    def report_job(self, job_id, incarnation, stage, iteration, env_steps_sampled, rows, last_checkpoint="",
                   reason="", timeout=5.0) -> dict[str, Any]:
        assert timeout <= 5.0
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.unknown:
            raise NotFoundError(f"no job named {job_id!r}")
        if self.down or self.fail_next:
            self.fail_next = max(0, self.fail_next - 1)
            self.failed += 1
            self.failed_at.append(time.monotonic())
            self.failed_batches.append([row.get("iteration") for row in rows])
            if self.error is not None:
                raise self.error("the coordinator failed the call")
            raise (ActorUnavailableError if self.failed % 2 else FtrlTimeoutError)("coordinator unreachable")
        with self.lock:
            self.calls.append({"job_id": job_id, "incarnation": incarnation, "stage": stage, "iteration": iteration,
                               "env_steps_sampled": env_steps_sampled, "rows": list(rows),
                               "last_checkpoint": last_checkpoint, "reason": reason})
            if any(row.get("iteration") == self.down_after for row in rows):
                self.down = True
            return {"job_id": job_id, "stage": stage, **self.info}

    def rows(self) -> list[dict[str, Any]]:
        with self.lock:
            return [row for call in self.calls for row in call["rows"]]

    def batches(self) -> list[list[int]]:
        """The iterations of the rows of each call that carried rows."""
        with self.lock:
            return [[row["iteration"] for row in call["rows"]] for call in self.calls if call["rows"]]

    def stages(self) -> list[str]:
        with self.lock:
            return [call["stage"] for call in self.calls]


def _until(pred, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _link(fake, **kwargs) -> JobLink:
    kwargs = {"poll_interval_s": 0.05, "retry_interval_s": 0.02, "max_backoff_s": 0.05, **kwargs}
    return JobLink(fake, "job", 2, **kwargs).start()


# ---------------------------------------------------------------------------- JobLink


def test_reports_kept_while_the_coordinator_is_down_are_delivered_later_newest_first():
    fake = FakeCoordinator()
    fake.down = True
    link = _link(fake, batch_rows=2)
    for i in range(1, 8):
        link.report("RUNNING", iteration=i, env_steps_sampled=10 * i, row={"iteration": i},
                    last_checkpoint=f"ck{i}")
    _until(lambda: fake.failed >= 3, what="failed attempts")
    assert fake.calls == [] and link.pending_rows == 7
    fake.down = False
    assert link.finish("FINISHED", "stop_iters", timeout_s=10)
    # the current state with the newest row, then the older rows in order: each once
    assert fake.batches() == [[7], [1, 2], [3, 4], [5, 6]]
    assert {(c["iteration"], c["env_steps_sampled"], c["last_checkpoint"]) for c in fake.calls} == {(7, 70, "ck7")}
    assert fake.calls[-1] == {"job_id": "job", "incarnation": 2, "stage": "FINISHED", "iteration": 7,
                              "env_steps_sampled": 70, "rows": [{"iteration": 5}, {"iteration": 6}],
                              "last_checkpoint": "ck7", "reason": "stop_iters"}
    # rows go first: the final stage only with the last of them
    assert "FINISHED" not in [call["stage"] for call in fake.calls[:-1]]
    assert not link._thread.is_alive()


def test_after_each_failed_call_the_newest_row_goes_first_then_the_rest_in_order():
    fake = FakeCoordinator()
    link = JobLink(fake, "job", 1, poll_interval_s=0.05, retry_interval_s=0.02, batch_rows=3)
    for i in range(1, 6):  # queued before the first call: that one, too, carries the newest only
        link.report("RUNNING", iteration=i, row={"iteration": i})
    fake.fail_next = 1
    link.start()
    _until(lambda: link.pending_rows == 0, what="the rows delivered")
    assert fake.batches() == [[5], [1, 2, 3], [4]]
    assert fake.calls[0]["iteration"] == 5
    # an outage in the middle of the older rows: rows that came meanwhile go first, then
    # the older ones go on where they were; nothing twice, nothing lost
    fake.down = True
    for i in range(6, 13):
        link.report("RUNNING", iteration=i, row={"iteration": i})
    _until(lambda: fake.failed >= 3, what="failed attempts")
    fake.down, fake.down_after = False, 12  # and down again right after the newest row
    _until(lambda: len(fake.batches()) >= 4 and fake.down, what="a delivery")
    for i in range(13, 15):
        link.report("RUNNING", iteration=i, row={"iteration": i})
    failed = fake.failed
    _until(lambda: fake.failed >= failed + 2, what="failed attempts")
    fake.down = False
    _until(lambda: link.pending_rows == 0, what="the rows delivered")
    assert fake.batches()[3:] == [[12], [14], [6, 7, 8], [9, 10, 11], [13]]
    delivered = [r["iteration"] for r in fake.rows()]
    assert sorted(delivered) == list(range(1, 15)) and len(set(delivered)) == 14
    assert all(call["iteration"] == 14 for call in fake.calls[-3:])  # the current state on every call
    link.close()


def test_after_an_outage_history_follows_and_the_final_stage_goes_with_the_last_row():
    fake = FakeCoordinator()
    link = _link(fake, batch_rows=100)
    link.report("RUNNING", iteration=0)
    _until(lambda: len(fake.calls) >= 1, what="the first report")
    fake.down = True
    for i in range(1, 251):
        link.report("RUNNING", iteration=i, env_steps_sampled=i, row={"iteration": i})
    threading.Timer(0.3, lambda: setattr(fake, "down", False)).start()
    assert link.finish("STOPPED", "stopped on request", timeout_s=10)
    assert fake.batches() == [[250], list(range(1, 101)), list(range(101, 201)), list(range(201, 250))]
    stages = [call["stage"] for call in fake.calls if call["rows"]]
    assert stages == ["RUNNING", "RUNNING", "RUNNING", "STOPPED"] and fake.stages().count("STOPPED") == 1
    assert link.final_delivered and link.rows_dropped == 0


def test_an_unreachable_coordinator_is_retried_at_a_short_fixed_interval(caplog):
    fake = FakeCoordinator()
    fake.down = True
    caplog.set_level(logging.INFO, logger="ftrl.rl.driver.job_link")
    link = JobLink(fake, "job", 1, poll_interval_s=0.05).start()  # the default intervals
    link.report("RUNNING", iteration=1, row={"iteration": 1})
    # 8 tries at 0.1 s take ~0.7 s; backing off (0.5, 1, 2, 4, 5 s...) they would take 22 s
    _until(lambda: fake.failed >= 8, timeout=8.0, what="8 tries without backing off")
    fake.down = False
    _until(lambda: link.pending_rows == 0, what="the row delivered")
    fake.down = True  # a second outage
    _until(lambda: fake.failed >= 20, what="more failed attempts")
    failures = [r for r in caplog.records if "report to the coordinator failed" in r.getMessage()]
    assert len(failures) == 2  # one line per outage
    fake.down = False
    link.close(flush_s=5)


def test_a_coordinator_that_fails_calls_is_retried_backing_off():
    fake = FakeCoordinator()
    fake.down, fake.error = True, FtrlError
    link = JobLink(fake, "job", 1, poll_interval_s=0.05, max_backoff_s=5.0).start()
    link.report("RUNNING", iteration=1, row={"iteration": 1})
    _until(lambda: fake.failed >= 3, timeout=20.0, what="3 tries")
    gaps = [b - a for a, b in zip(fake.failed_at, fake.failed_at[1:], strict=False)]
    assert gaps[0] >= 0.45 and gaps[1] >= 0.95, gaps  # at 0, 0.5 and 1.5 s: backing off
    fake.down = False
    assert link.finish("FINISHED", timeout_s=10) and fake.batches() == [[1]]


def test_unsent_rows_are_bounded_dropping_the_oldest():
    fake = FakeCoordinator()
    fake.down = True
    link = _link(fake, max_rows=3)
    for i in range(1, 6):
        link.report("RUNNING", iteration=i, row={"iteration": i})
    assert link.pending_rows == 3 and link.rows_dropped == 2
    fake.down = False
    assert link.finish("STOPPED", "stopped on request", timeout_s=10)
    assert fake.batches() == [[5], [3, 4]]


def test_report_never_blocks_on_a_slow_coordinator():
    fake = FakeCoordinator()
    fake.delay_s = 0.5
    link = _link(fake)
    t0 = time.monotonic()
    for i in range(1, 2001):
        link.report("RUNNING", iteration=i, row={"iteration": i})
    assert time.monotonic() - t0 < 0.5
    fake.delay_s = 0.0
    assert link.finish("FINISHED", "stop_iters", timeout_s=30)
    delivered = [r["iteration"] for r in fake.rows()]
    assert sorted(delivered) == list(range(1, 2001))  # each once (the first call may take the newest first)
    assert delivered[1:] == sorted(delivered[1:])


def test_an_idle_link_polls_and_hands_every_reply_over():
    fake = FakeCoordinator(num_env_runners=3)
    replies: list[dict] = []
    link = _link(fake, on_reply=replies.append)
    link.report("RUNNING", iteration=1)
    _until(lambda: len(fake.calls) >= 4, what="polls")
    assert all(call["rows"] == [] for call in fake.calls)
    assert fake.calls[-1]["stage"] == "RUNNING" and fake.calls[-1]["iteration"] == 1
    assert replies and replies[-1]["num_env_runners"] == 3
    link.close()
    assert not link._thread.is_alive()


def test_an_unknown_job_ends_the_link_quietly():
    fake = FakeCoordinator()
    fake.unknown = True
    link = _link(fake)
    link.report("RUNNING", iteration=1, row={"iteration": 1})
    _until(lambda: not link._thread.is_alive(), what="the link to end")
    assert "NotFoundError" in link.disabled
    link.report("RUNNING", iteration=2, row={"iteration": 2})
    t0 = time.monotonic()
    assert link.finish("FINISHED", "stop_iters", timeout_s=10)
    assert time.monotonic() - t0 < 1.0 and link.pending_rows == 0


def test_a_final_report_the_coordinator_never_takes_is_given_up_after_the_bound():
    fake = FakeCoordinator()
    fake.down = True
    link = _link(fake)
    t0 = time.monotonic()
    assert not link.finish("FAILED", "boom", timeout_s=0.5)
    assert 0.5 <= time.monotonic() - t0 < 3.0 and not link._thread.is_alive()


def test_a_reply_naming_a_newer_driver_ends_the_link():
    fake = FakeCoordinator(driver_incarnation=5)
    link = _link(fake)
    _until(lambda: bool(link.disabled), what="the link to end")
    assert "incarnation 5" in link.disabled


# ---------------------------------------------------------------------------- the driver


def _job(stop_iters: int = 100_000, n: int = 0) -> dict[str, Any]:
    return {
        "environment": {"env": "CartPole-v1"},
        "env_runners": {"num_env_runners": n, "num_envs_per_env_runner": 2, "rollout_fragment_length": 16},
        "training": {"train_batch_size": 32, "minibatch_size": 32, "num_epochs": 1},
        "checkpointing": {"checkpoint_interval": 1000},
        "stop": {"stop_iters": stop_iters},
    }


def test_driver_reports_starting_running_every_row_and_the_end(tmp_path):
    fake = FakeCoordinator()
    driver = AlgorithmDriver(_job(stop_iters=4), str(tmp_path), job_name="j", job_client=fake)
    status = driver.wait(60)
    assert status["stage"] == "FINISHED"
    stages = fake.stages()
    order = {"STARTING": 0, "RUNNING": 1, "FINISHED": 2}
    assert stages[0] == "STARTING" and stages[-1] == "FINISHED" and stages.count("FINISHED") == 1
    assert [order[s] for s in stages] == sorted(order[s] for s in stages)  # polls repeat; never back
    assert [r["iteration"] for r in fake.rows()] == [1, 2, 3, 4]
    assert fake.rows()[0]["num_env_runners"] == 0 and "episode_return_mean" in fake.rows()[0]
    last = fake.calls[-1]
    assert last["reason"] == "stop_iters" and last["iteration"] == 4
    assert last["last_checkpoint"].endswith("checkpoint_00000004.ftrl")
    assert {call["incarnation"] for call in fake.calls} == {1} and {c["job_id"] for c in fake.calls} == {"j"}


def test_driver_stops_when_the_coordinator_asks(tmp_path):
    fake = FakeCoordinator()
    driver = AlgorithmDriver(_job(), str(tmp_path), job_name="j", job_client=fake)
    _until(lambda: (driver.status().get("iteration") or 0) >= 2, timeout=60, what="two iterations")
    fake.info["stop_requested"] = True
    status = driver.wait(60)
    assert status["stage"] == "STOPPED" and status["summary"]["stop_reason"] == "stopped"
    last = fake.calls[-1]
    assert last["stage"] == "STOPPED" and last["reason"] == "stopped on request"
    assert last["last_checkpoint"].endswith(f"checkpoint_{status['iteration']:08d}.ftrl")
    assert [r["iteration"] for r in fake.rows()] == list(range(1, status["iteration"] + 1))


def test_driver_reports_the_error_when_the_run_fails(tmp_path):
    fake = FakeCoordinator()
    job = _job()
    job["environment"] = {"env": "NoSuchEnv-v0"}
    driver = AlgorithmDriver(job, str(tmp_path), job_name="j", job_client=fake)
    status = driver.wait(60)
    assert status["stage"] == "FAILED"
    assert fake.calls[-1]["stage"] == "FAILED" and fake.calls[-1]["reason"] == status["error"]


def test_driver_keeps_training_while_the_coordinator_is_down(tmp_path):
    fake = FakeCoordinator()
    fake.down = True
    driver = AlgorithmDriver(_job(stop_iters=5), str(tmp_path), job_name="j", job_client=fake)
    _until(lambda: (driver.status().get("iteration") or 0) >= 5, timeout=60, what="five iterations")
    # the status says 5 as the iteration ends; its row is on disk (and reportable) once the
    # state writer wrote it, a moment later (longer on a loaded machine)
    rows = tmp_path / "metrics.jsonl"
    _until(lambda: rows.exists() and len(rows.read_text().splitlines()) >= 5, timeout=30, what="row 5 on disk")
    # and the link holds it: a retry carried it (newest first), so no call in flight has an older one
    _until(lambda: [5] in fake.failed_batches, timeout=30, what="a retry carrying row 5")
    assert fake.calls == []
    assert not driver._done.is_set()  # waits for the final report to be taken
    fake.down = False
    status = driver.wait(30)
    assert status["stage"] == "FINISHED"
    # the current state with the newest row first, then the older rows in order
    assert fake.batches() == [[5], [1, 2, 3, 4]] and fake.stages()[-1] == "FINISHED"
    assert fake.calls[0]["iteration"] == 5


def test_driver_applies_each_wanted_size_once(tmp_path):
    fake = FakeCoordinator(num_env_runners=1)
    calls: list[int] = []
    with LocalClient() as client:
        driver = AlgorithmDriver(_job(n=1), str(tmp_path), job_name="j", client=client, job_client=fake)
        _until(lambda: driver._algo is not None and len(fake.calls) >= 3, timeout=60, what="the run")
        original = driver._algo.scale_env_runners

        def spy(n):
            calls.append(n)
            original(n)

        driver._algo.scale_env_runners = spy
        fake.info["num_env_runners"] = 2
        _until(lambda: any(r["num_env_runners"] == 2 and r["num_healthy_env_runners"] == 2 for r in fake.rows()),
               timeout=60, what="two healthy runners in the rows")
        n_calls = len(fake.calls)
        _until(lambda: len(fake.calls) >= n_calls + 3, what="more replies")
        assert calls == [2]  # once, though every reply says 2
        fake.info["num_env_runners"] = 1
        _until(lambda: fake.rows()[-1]["num_env_runners"] == 1, timeout=60, what="back to one runner")
        assert calls == [2, 1]
        driver.stop()
        assert driver.wait(60)["stage"] == "STOPPED"


def test_drained_driver_checkpoints_keeps_its_runners_and_reports_no_end(tmp_path):
    fake = FakeCoordinator(num_env_runners=1)
    with LocalClient() as client:
        driver = AlgorithmDriver(_job(n=1), str(tmp_path), job_name="j", client=client, job_client=fake)
        _until(lambda: (driver.status().get("iteration") or 0) >= 2, timeout=60, what="two iterations")
        status = driver.__ftrl_drain__()
        assert status["draining"] and status["stage"] == "RUNNING"
        summary = status["summary"]
        assert summary["stop_reason"] == "drained"
        assert summary["checkpoint"].endswith(f"checkpoint_{summary['iteration']:08d}.ftrl")
        assert not (tmp_path / "result.json").exists()  # the job has not ended
        assert set(fake.stages()) <= {"STARTING", "RUNNING"}
        assert [r["iteration"] for r in fake.rows()] == list(range(1, summary["iteration"] + 1))
        assert fake.calls[-1]["last_checkpoint"] == summary["checkpoint"]
        # the runner stays up for the driver's next incarnation, which resumes there
        assert {a["name"]: a["state"] for a in client.actors()} == {"j/env_runner/0": "ALIVE"}
        fake2 = FakeCoordinator(num_env_runners=1)
        again = AlgorithmDriver(_job(stop_iters=summary["iteration"] + 1, n=1), str(tmp_path), job_name="j",
                                client=client, job_client=fake2)
        status = again.wait(60)
        # the newest state: the drained iteration's (its checkpoint is as new)
        assert status["stage"] == "FINISHED" and status["restored_from"] == str(tmp_path / "driver_state.ftrl")
        assert [r["iteration"] for r in fake2.rows()] == [summary["iteration"] + 1]


@pytest.mark.parametrize("stage", ["RUNNING", "STARTING"])
def test_finish_refuses_a_stage_that_is_not_final(stage):
    link = JobLink(FakeCoordinator(), "job", 1)
    with pytest.raises(ValueError):
        link.finish(stage)
