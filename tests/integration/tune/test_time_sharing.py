"""A PBT population larger than the cluster, on real processes: 4 members (one runner
each) on room for 2. Members take turns at their perturbation points (PAUSED seen, Tune's
rule), every member reaches its stop, no member's perturbation point is more than an
interval behind another's (but for the rows it ran while the tuner was down), and a paused member's iterations go on from its checkpoint (no gap, no repeat). The tuner
is SIGKILLed once while a member waits for its turn: its worker restarts it in place and
it goes on from experiment.json."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import ftrl
from ftrl import tune
from tests.cluster import wait_until
from tests.integration.tune.test_tune import rows, small_ppo

INTERVAL = 4
STOP = 12


def num_rows(trial_dir: Path) -> int:
    """How many rows a trial wrote (0 before its first)."""
    return len(rows(trial_dir)) if (trial_dir / "metrics.jsonl").exists() else 0


def test_four_members_on_room_for_two_take_turns(make_cluster, tmp_path):
    cluster = make_cluster(workers=1, slots=2)
    client = cluster.client()
    out: dict = {}
    tuner = ftrl.Tuner(
        # iterations of ~0.4 s: the tuner (a pass every 0.25 s) sees every row, as with real iteration lengths
        small_ppo(runners=1, batch=256).checkpointing(checkpoint_interval=2)
        .reporting(min_sample_timesteps_per_iteration=2048),
        param_space={"lr": tune.grid_search([1e-3, 2e-3, 3e-3, 5e-4])},
        tune_config=ftrl.TuneConfig(scheduler=tune.PopulationBasedTraining(
            time_attr="training_iteration", perturbation_interval=INTERVAL, quantile_fraction=0.25,
            hyperparam_mutations={"lr": [5e-4, 1e-3, 2e-3, 3e-3]})),
        run_config=ftrl.RunConfig(name="turns", storage_path=str(tmp_path), stop={"training_iteration": STOP},
                                  verbose=0),
        client=client)
    runner = threading.Thread(target=lambda: out.setdefault("results", tuner.fit()), daemon=True)
    runner.start()
    expfile = tmp_path / "turns" / "experiment.json"
    killed_pid = 0
    seen_paused: set[str] = set()
    widest = 0.0
    at_kill: dict[str, int] = {}  # each member's rows when the tuner was killed
    while_down = -1  # the most rows a member added while no tuner saw them (it trains on)
    deadline = time.monotonic() + 300
    while runner.is_alive() and time.monotonic() < deadline:
        try:
            state = json.loads(expfile.read_text())
        except (OSError, ValueError):
            time.sleep(0.1)
            continue
        trials = state["trials"]
        seen_paused |= {t for t, v in trials.items() if v["status"] == "PAUSED"}
        if seen_paused and not killed_pid:  # mid time-sharing: a member waits for its turn
            killed_pid = int(client.actor("turns/tuner")["pid"])
            at_kill = {t: num_rows(tmp_path / "turns" / t) for t in trials}
            os.kill(killed_pid, signal.SIGKILL)
        if killed_pid and while_down < 0 and state["tuner_incarnation"] > 1:  # the tuner is back
            while_down = max(num_rows(tmp_path / "turns" / t) - n for t, n in at_kill.items())
        running = sum(v["status"] == "RUNNING" for v in trials.values())
        assert running <= 2
        members = state.get("pbt", {}).get("members", {})
        points = [m["last_perturbation_time"] for t, m in members.items() if trials[t]["status"] != "TERMINATED"]
        if len(points) == 4:  # how far apart the members' perturbation points are
            widest = max(widest, max(points) - min(points))
        time.sleep(0.1)
    runner.join(5)
    assert not runner.is_alive(), "the experiment did not finish"
    results = out["results"]
    assert results.status == "FINISHED" and results.num_terminated == 4
    assert len(seen_paused) >= 2  # members yielded their turns
    # at any perturbation, no member more than an interval behind (a row missed), but for
    # the rows a member ran past its point while the tuner was down (drivers never wait for it)
    assert widest <= INTERVAL + 1 + max(0, while_down), (widest, while_down)
    state = json.loads(expfile.read_text())
    assert state["counters"]["num_pauses"] >= 2 and state["counters"]["num_preemptions"] == 0
    assert state["counters"]["num_trial_failures"] == 0
    assert killed_pid and state["tuner_incarnation"] > 1  # restarted, and went on from experiment.json
    for tid in state["trials"]:
        its_rows = rows(tmp_path / "turns" / tid)
        assert [r["iteration"] for r in its_rows] == list(range(1, STOP + 1)), tid  # no gap, no repeat
    paused = [t for t, v in state["trials"].items() if v["num_pauses"] > 0]
    assert paused and all(json.loads((tmp_path / "turns" / t / "result.json").read_text())["restored_from"]
                          for t in paused)
    wait_until(lambda: not [a for a in client.actors() if a["name"].startswith("turns-") and a["state"] != "DEAD"],
               timeout=30, what="every trial's actors gone")


def test_members_whose_drivers_ask_for_ondemand_room_take_turns_without_preemption(make_cluster, tmp_path):
    """Placement by role meets time-sharing (seed 002's population): every driver asks for
    `ondemand` room, of which the one worker has enough for two; 4 members, 2 at a time.
    A member starts in the room of one that yielded only once that one's driver is gone:
    no driver ever waits unplaced, and none is pre-empted for waiting (it is not a lost node)."""
    cluster = make_cluster(workers=1, slots=4, worker_args=["--resources", "ondemand=0.02"])
    client = cluster.client()
    out: dict = {}
    tuner = ftrl.Tuner(
        small_ppo(runners=1, batch=256).checkpointing(checkpoint_interval=2)
        .reporting(min_sample_timesteps_per_iteration=2048)
        .resources(custom_resources_for_main_process={"ondemand": 0.01}),
        param_space={"lr": tune.grid_search([1e-3, 2e-3, 3e-3, 5e-4])},
        tune_config=ftrl.TuneConfig(max_concurrent_trials=2, scheduler=tune.PopulationBasedTraining(
            time_attr="training_iteration", perturbation_interval=INTERVAL, quantile_fraction=0.25,
            hyperparam_mutations={"lr": [5e-4, 1e-3, 2e-3, 3e-3]})),
        run_config=ftrl.RunConfig(name="ondemand", storage_path=str(tmp_path), stop={"training_iteration": STOP},
                                  verbose=0),
        client=client)
    runner = threading.Thread(target=lambda: out.setdefault("results", tuner.fit()), daemon=True)
    runner.start()
    unplaced: set[str] = set()  # drivers seen waiting for room on no node
    deadline = time.monotonic() + 300
    while runner.is_alive() and time.monotonic() < deadline:
        unplaced |= {a["name"] for a in client.actors() if a["name"].endswith("/algorithm")
                     and a["state"] == "PENDING" and not a.get("node_id")}
        time.sleep(0.05)
    runner.join(5)
    assert not runner.is_alive(), "the experiment did not finish"
    assert out["results"].status == "FINISHED" and out["results"].num_terminated == 4
    state = json.loads((tmp_path / "ondemand" / "experiment.json").read_text())
    assert state["counters"]["num_pauses"] >= 2  # members took turns
    assert state["counters"]["num_preemptions"] == 0 and state["counters"]["num_trial_failures"] == 0
    assert not unplaced, unplaced
    for tid in state["trials"]:
        assert [r["iteration"] for r in rows(tmp_path / "ondemand" / tid)] == list(range(1, STOP + 1)), tid
