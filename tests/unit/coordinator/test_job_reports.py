"""JobTable.report with rows out of order (a driver's job link back after an outage sends
its current state and newest row first, the older rows after it): every row is stored,
the record never moves back; job records of older versions still load."""

from __future__ import annotations

import msgpack
import pytest

from ftrl.coordinator.jobs import JobRecord, JobStage
from ftrl.coordinator.store import Batch, SQLiteStore
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.errors import FailedPreconditionError
from tests.unit.coordinator.controller_harness import Harness


def _submit(h: Harness, tmp_path, job_id: str = "j") -> tuple[JobRecord, int]:
    """A job whose driver is placed and started: (its record, the driver's incarnation)."""
    data = {"algo": "ppo", "env": "CartPole-v1", "num_env_runners": 1}
    job = h.c.submit_job(pb.SubmitJobRequest(job_id=job_id, config=codec.encode(data),
                                             output_dir=str(tmp_path / job_id)))
    _, incarnation = h.started(f"{job_id}/algorithm")
    return job, incarnation


def _report(h: Harness, incarnation: int, iteration: int, *rows: int, job_id: str = "j",
            tag: str = "") -> None:
    """A RUNNING report at `iteration` (env steps 10 per iteration) carrying `rows`."""
    results = [pb.JobResult(iteration=i, row=codec.encode({"iteration": i, "tag": tag})) for i in rows]
    h.c.report_job(pb.JobReport(job_id=job_id, incarnation=incarnation, stage=pb.JOB_RUNNING,
                                iteration=iteration, env_steps_sampled=10 * iteration, rows=results))


def _shown(job: JobRecord) -> tuple[int, int, int, int]:
    """(iteration, env steps, the shown row's iteration, its `metrics_iteration`)."""
    return job.iteration, job.env_steps_sampled, codec.decode(job.metrics)["iteration"], job.metrics_iteration


def test_history_after_the_newest_row_is_stored_but_the_record_stays_on_the_newest(tmp_path):
    h = Harness()
    h.register("n1", cpu=4)
    job, inc = _submit(h, tmp_path)
    _report(h, inc, 2, 1, 2)
    assert _shown(job) == (2, 20, 2, 2) and job.stage == JobStage.RUNNING
    # back after an outage: the current state with the newest row, then the older rows
    _report(h, inc, 10, 10)
    assert _shown(job) == (10, 100, 10, 10)
    _report(h, inc, 11, 3, 4, 5, 6, 7, 8, 9)  # the driver went on meanwhile: its state is 11
    assert _shown(job) == (11, 110, 10, 10)
    assert [i for i, _ in h.c.store.results("j")] == list(range(1, 11))  # all of them, by iteration
    info = h.c.jobs.info(job)
    assert (info.iteration, codec.decode(info.metrics)["iteration"]) == (11, 10)
    _report(h, inc, 11, 11)
    assert _shown(job) == (11, 110, 11, 11)


def test_counters_never_go_back_but_a_redone_row_of_the_shown_iteration_shows(tmp_path):
    h = Harness()
    h.register("n1", cpu=4)
    job, inc = _submit(h, tmp_path)
    _report(h, inc, 5, 1, 2, 3, 4, 5)
    # a driver incarnation resuming from the checkpoint of iteration 3 redoes 4 and 5
    _report(h, inc + 1, 3)
    assert _shown(job) == (5, 50, 5, 5) and job.driver_incarnation == inc + 1
    _report(h, inc + 1, 4, 4, tag="again")
    assert _shown(job) == (5, 50, 5, 5)
    _report(h, inc + 1, 5, 5, tag="again")
    assert _shown(job) == (5, 50, 5, 5) and codec.decode(job.metrics)["tag"] == "again"
    assert dict(h.c.store.results("j"))[4] == codec.encode({"iteration": 4, "tag": "again"})
    _report(h, inc + 1, 6, 6)
    assert _shown(job) == (6, 60, 6, 6)


def test_a_fresh_submit_starts_a_new_record_from_zero(tmp_path):
    h = Harness()
    h.register("n1", cpu=4)
    job, inc = _submit(h, tmp_path)
    _report(h, inc, 5, 5)
    h.c.report_job(pb.JobReport(job_id="j", incarnation=inc, stage=pb.JOB_STOPPED, iteration=5,
                                env_steps_sampled=50))
    again = h.c.submit_job(pb.SubmitJobRequest(job_id="j", config=job.config, output_dir=str(tmp_path / "j2")))
    assert again is not job and (again.iteration, again.metrics_iteration) == (0, 0)
    driver = h.c.actors["j/algorithm"]
    h.started("j/algorithm")
    _report(h, driver.incarnation, 1, 1)
    assert _shown(again) == (1, 10, 1, 1)


@pytest.mark.parametrize("saved", ["driver_state.ftrl", "checkpoints/checkpoint_00000010.ftrl"])
def test_a_fresh_submit_into_a_dir_holding_a_runs_state_is_refused_a_resume_is_not(tmp_path, saved):
    h = Harness()
    h.register("n1", cpu=4)
    (tmp_path / "j" / saved).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "j" / saved).write_bytes(b"state")
    config = codec.encode({"algo": "ppo", "env": "CartPole-v1", "num_env_runners": 1})
    with pytest.raises(FailedPreconditionError, match="already holds the state of an earlier run"):
        h.c.submit_job(pb.SubmitJobRequest(job_id="j", config=config, output_dir=str(tmp_path / "j")))
    assert "j" not in h.c.jobs.jobs
    job = h.c.submit_job(pb.SubmitJobRequest(job_id="j", config=config, output_dir=str(tmp_path / "j"),
                                             resume=True))
    assert job.resume and not job.stage.final


def test_the_shown_iteration_is_durable_and_old_records_without_it_load(tmp_path):
    record = JobRecord(job_id="j", config=b"\x80", output_dir="/out", num_env_runners=1, num_learners=0,
                       iteration=7, metrics=codec.encode({"iteration": 6}), metrics_iteration=6)
    assert JobRecord.from_row("j", record.to_row()) == record
    old = msgpack.unpackb(record.to_row())
    del old["metrics_iteration"]  # a record written before the field existed
    assert JobRecord.from_row("j", msgpack.packb(old)).metrics_iteration == 6  # from the shown row
    empty = {**old, "metrics": b"\x80"}
    assert JobRecord.from_row("j", msgpack.packb(empty)).metrics_iteration == 0

    # a coordinator restarted on a state dir holding such a record keeps its row shown
    h = Harness(store=SQLiteStore(tmp_path / "state"))
    h.register("n1", cpu=4)
    job, inc = _submit(h, tmp_path)
    _report(h, inc, 5, 1, 2, 3, 4, 5)
    h.c.store.close()
    store = SQLiteStore(tmp_path / "state")
    row = msgpack.unpackb(store.load().tables["jobs"]["j"])
    del row["metrics_iteration"]
    batch = Batch()
    batch.put("jobs", "j", msgpack.packb(row))
    store.commit(batch)
    store.close()
    h2 = Harness(store=SQLiteStore(tmp_path / "state"), start_time=h.now + 100)
    job = h2.c.jobs.get("j")
    assert _shown(job) == (5, 50, 5, 5)
    _report(h2, inc, 6, 3)  # a late row of an older iteration
    assert _shown(job) == (6, 60, 5, 5)
    h2.c.store.close()
    h3 = Harness(store=SQLiteStore(tmp_path / "state"), start_time=h2.now + 100)
    assert _shown(h3.c.jobs.get("j")) == (6, 60, 5, 5)  # written back with the field
    assert msgpack.unpackb(h3.c.store.load().tables["jobs"]["j"])["metrics_iteration"] == 5
    h3.c.store.close()
