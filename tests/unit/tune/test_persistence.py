"""ftrl.tune.persistence and the statuses on disk: experiment.json written by c79197e (the
main before issue 34) loads, its trials' statuses become `TrialStatus`es and are written back
as the same strings; the store's saves wake status waiters."""

from __future__ import annotations

import json
import tarfile
import threading
from pathlib import Path

import pytest

from ftrl.tune.experiment import (
    FINAL_EXPERIMENT_STATUSES,
    ExperimentStatus,
    Trial,
    TrialStatus,
    read_state,
)
from ftrl.tune.persistence import ExperimentStore
from ftrl.wire.errors import ConfigError

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "main_c79197e" / "state.tar.gz"


@pytest.fixture
def old_experiment(tmp_path) -> Path:
    """The PBT experiment's experiment.json as c79197e wrote it (in a directory of its own)."""
    with tarfile.open(FIXTURE) as tar:
        data = tar.extractfile("tune/pbt/experiment.json").read()
    (tmp_path / "experiment.json").write_bytes(data)
    return tmp_path


#: trial fields added since c79197e, with the values an old trial gets
NEW_TRIAL_FIELDS = {"num_pauses": 0, "paused_because": ""}


def _without_new_fields(trial: dict) -> dict:
    assert {k: trial[k] for k in NEW_TRIAL_FIELDS} == NEW_TRIAL_FIELDS
    return {k: v for k, v in trial.items() if k not in NEW_TRIAL_FIELDS}


def test_old_trials_load_as_statuses_and_write_back_the_same(old_experiment):
    raw = json.loads((old_experiment / "experiment.json").read_text())
    for tid, data in raw["trials"].items():
        trial = Trial.from_dict(data)
        assert type(trial.status) is TrialStatus and trial.status == data["status"]
        back = _without_new_fields(trial.to_dict())
        assert type(back["status"]) is str
        assert json.dumps(back, indent=2, sort_keys=True) == json.dumps(data, indent=2, sort_keys=True), tid


def test_the_store_rewrites_the_old_file_with_the_same_strings(old_experiment):
    before = (old_experiment / "experiment.json").read_text()
    store = ExperimentStore(old_experiment)
    trials = {tid: Trial.from_dict(t) for tid, t in store.state["trials"].items()}
    store.state["status"] = ExperimentStatus(store.state["status"])
    store.save(trials={tid: t.to_dict() for tid, t in trials.items()})
    after = (old_experiment / "experiment.json").read_text()
    old, new = json.loads(before), json.loads(after)
    assert new.pop("updated_at") >= old.pop("updated_at")
    new["trials"] = {tid: _without_new_fields(t) for tid, t in new["trials"].items()}
    assert new == old  # the same strings: statuses written back as they were
    assert read_state(old_experiment)["status"] == "RUNNING"


def test_an_unknown_status_is_refused_by_name():
    with pytest.raises(ConfigError, match="trial 't' has an unknown status 'SLEEPING'"):
        Trial.from_dict({"trial_id": "t", "index": 0, "config": {}, "initial_config": {}, "output_dir": "/x",
                         "status": "SLEEPING"})


def test_statuses():
    assert [s.value for s in TrialStatus] == ["PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR"]
    assert {s for s in TrialStatus if s.ended} == {TrialStatus.TERMINATED, TrialStatus.ERROR}
    assert {s for s in ExperimentStatus if s.final} == FINAL_EXPERIMENT_STATUSES
    assert ExperimentStatus.RUNNING not in FINAL_EXPERIMENT_STATUSES and "STOPPED" in FINAL_EXPERIMENT_STATUSES


def test_a_save_wakes_a_waiter_and_close_wakes_them_for_good(old_experiment):
    store = ExperimentStore(old_experiment)
    assert store.seq == 0 and not store.closed
    woke = threading.Event()

    def waiter() -> None:
        store.wait_for_save(0, 30.0)
        woke.set()

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    assert not woke.wait(0.2)
    store.save(counters={"num_preemptions": 1})
    assert woke.wait(10.0)
    assert store.seq == 1 and read_state(old_experiment)["counters"] == {"num_preemptions": 1}
    store.wait_for_save(0, 30.0)  # already past: returns at once
    assert not store.wait_closed(0.0)
    store.close()
    assert store.closed and store.wait_closed(0.0)
    store.wait_for_save(99, 30.0)  # closed: returns at once
