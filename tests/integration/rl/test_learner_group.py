"""The elastic learner group on real processes (gloo): learners SIGKILLed and SIGSTOPped
mid-update, added and removed while training, rank 0 killed, a refused joiner, a world
below min_learners, a resume with another number of learners.

One cluster for the module (actor hang detection is off for practical purposes, so a
SIGSTOPped learner is found by the collective timeout, not by the worker's pings).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import ftrl
from ftrl.config import StopCriteria
from ftrl.rl.algorithms.ppo import PPO
from ftrl.rl.learning.learner_group import LEARNER_CLASS
from ftrl.wire.errors import ActorStartError
from tests.cluster import new_cluster, wait_until

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster():
    with new_cluster(workers=1, slots=12, actor_hang_timeout=120.0, spares=2) as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster):
    c = cluster.client()
    yield c
    c.close()


def _config(n: int, **learners) -> ftrl.PPOConfig:
    learners.setdefault("learner_collective_timeout_s", 20.0)
    return (ftrl.PPOConfig().environment("CartPole-v1")
            .env_runners(num_env_runners=1, num_envs_per_env_runner=8, sample_timeout_s=60.0)
            .training(train_batch_size=1024, minibatch_size=32, num_epochs=6)
            .learners(num_learners=n, num_cpus_per_learner=0.5, **learners)
            .debugging(seed=7))


def _pid(client, name: str) -> int:
    return int(client.actor(name)["pid"])


def _signal_mid_update(client, name: str, sig: int) -> threading.Thread:
    """A thread that waits until `name` is inside an update, then sends `sig` to it."""
    handle = client.get_actor(name)

    def run() -> None:
        wait_until(lambda: handle.call("mesh_state")["busy"], timeout=60, interval=0.01,
                   what=f"{name} busy in an update")
        os.kill(_pid(client, name), sig)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _identical(algo) -> dict[str, str]:
    digests = algo.learner_group.digests()
    assert len(set(digests.values())) == 1, f"learners differ: {digests}"
    return digests


def _train_until(algo, predicate, max_iters: int = 20) -> dict:
    for _ in range(max_iters):
        result = algo.train()
        if predicate(result):
            return result
    raise AssertionError(f"condition not reached in {max_iters} iterations; last: "
                         f"{ {k: result.get(k) for k in ('num_learners', 'mesh_epoch', 'weights_version')} }")


def test_sigkill_mid_update_survivors_go_on_identical_and_the_restarted_learner_rejoins(client):
    algo = _config(3).build(client=client, job_name="kill")
    try:
        first = algo.train()
        assert first["num_learners"] == 3 and first["weights_version"] == 1
        _identical(algo)
        killer = _signal_mid_update(client, "kill/learner/1", signal.SIGKILL)
        t0 = time.monotonic()
        hit = algo.train()
        killer.join(5)
        # the interrupted update was retried whole by the two survivors, at once
        assert hit["learner"]["update_retries"] >= 1
        assert hit["num_learners"] == 2 and hit["mesh_epoch"] > first["mesh_epoch"]
        assert hit["weights_version"] == 2  # applied once, not twice, not half
        assert time.monotonic() - t0 < 60
        assert len(_identical(algo)) == 2
        # the restarted learner warms up, joins at a step boundary, gets the state
        back = _train_until(algo, lambda r: r["num_learners"] == 3)
        assert back["mesh_epoch"] > hit["mesh_epoch"]
        digests = _identical(algo)
        assert set(digests) == {f"kill/learner/{i}" for i in range(3)}
        assert client.actor("kill/learner/1")["incarnation"] >= 2
    finally:
        algo.stop()


def test_a_read_from_a_lone_learner_killed_between_updates_waits_for_its_restart(client):
    """One learner, SIGKILLed after an update: reading the group's state (what a checkpoint
    or a weights broadcast does) waits for the restarted learner instead of failing the
    job; it holds the committed version and training goes on from it."""
    algo = _config(1).build(client=client, job_name="lone")
    try:
        first = algo.train()
        pid = _pid(client, "lone/learner/0")
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: client.actor("lone/learner/0")["state"] != "ALIVE"
                   or _pid(client, "lone/learner/0") != pid, timeout=30, what="the learner's death seen")
        state = algo.learner_group.get_state()
        assert int(state["version"]) == first["weights_version"]
        assert client.actor("lone/learner/0")["incarnation"] >= 2
        after = algo.train()
        assert after["weights_version"] == first["weights_version"] + 1
        assert after["num_learners"] == 1
    finally:
        algo.stop()


def test_two_learners_killed_at_once_the_last_one_carries_on(client):
    algo = _config(3).build(client=client, job_name="two")
    try:
        algo.train()
        handle = client.get_actor("two/learner/0")
        killer = threading.Thread(target=lambda: (
            wait_until(lambda: handle.call("mesh_state")["busy"], timeout=60, interval=0.01),
            os.kill(_pid(client, "two/learner/0"), signal.SIGKILL),
            os.kill(_pid(client, "two/learner/2"), signal.SIGKILL)), daemon=True)
        killer.start()
        hit = algo.train()
        killer.join(5)
        assert hit["num_learners"] >= 1 and hit["weights_version"] == 2
        back = _train_until(algo, lambda r: r["num_learners"] == 3)
        assert back["weights_version"] > 2
        _identical(algo)
    finally:
        algo.stop()


def test_rank0_publisher_killed(client):
    algo = _config(2).build(client=client, job_name="rank0")
    try:
        before = algo.train()
        rank0 = client.get_mesh("rank0/learner")["members"][0]["name"]
        killer = _signal_mid_update(client, rank0, signal.SIGKILL)
        hit = algo.train()
        killer.join(5)
        assert hit["num_learners"] == 1 and hit["weights_version"] == before["weights_version"] + 1
        # weights keep flowing to the runner from the new rank 0: nothing is dropped as stale
        after = algo.train()
        assert after["weights_version"] == hit["weights_version"] + 1
        assert after["env_steps_sampled_this_iter"] >= 1024
        assert algo.env_runner_group.slots[0].synced_version == after["weights_version"]
    finally:
        algo.stop()


def test_scale_two_to_four_to_two_while_training(client):
    algo = _config(2).build(client=client, job_name="scale")
    try:
        assert algo.train()["num_learners"] == 2
        algo.scale_learners(4)
        grown = _train_until(algo, lambda r: r["num_learners"] == 4, max_iters=30)
        assert len(_identical(algo)) == 4
        algo.scale_learners(2)
        shrunk = algo.train()
        assert shrunk["num_learners"] == 2 and shrunk["mesh_epoch"] > grown["mesh_epoch"]
        assert len(_identical(algo)) == 2
        removed = {a["name"]: a["state"] for a in client.actors("scale/learner/")}
        assert sorted(n for n, s in removed.items() if s == "DEAD") == ["scale/learner/2", "scale/learner/3"]
    finally:
        algo.stop()


def test_sigstopped_learner_is_evicted_and_after_sigcont_rejoins_as_a_newcomer(client):
    algo = _config(3, learner_collective_timeout_s=3.0).build(client=client, job_name="stop")
    pid = _pid(client, "stop/learner/2")
    try:
        first = algo.train()
        stopper = _signal_mid_update(client, "stop/learner/2", signal.SIGSTOP)
        hit = algo.train()
        stopper.join(5)
        assert hit["num_learners"] == 2 and hit["num_learners_evicted"] >= 1
        assert hit["weights_version"] == first["weights_version"] + 1
        mesh = client.get_mesh("stop/learner")
        assert "stop/learner/2" not in {m["name"] for m in mesh["members"]}
        os.kill(pid, signal.SIGCONT)
        # it finds itself out of the mesh and joins again; it never re-enters its old epoch
        back = _train_until(algo, lambda r: r["num_learners"] == 3)
        assert back["mesh_epoch"] > hit["mesh_epoch"]
        assert _pid(client, "stop/learner/2") == pid  # the same process, not a restart
        _identical(algo)
    finally:
        os.kill(pid, signal.SIGCONT)
        algo.stop()


def test_a_learner_with_another_model_is_refused(client):
    algo = _config(1).build(client=client, job_name="cfg")
    try:
        algo.train()
        other = _config(1).training(model={"fcnet_hiddens": [8]}).to_dict()
        kwargs = {"config": other, "space_spec": algo.spec.to_dict(), "learner_class": PPO.learner_class_path}
        with pytest.raises(ActorStartError, match="refused"):
            client.create_actor(LEARNER_CLASS, name="cfg/learner/7", max_restarts=0, kwargs=kwargs,
                                resources={"cpu": 0.5})
        # the learner is the algorithm's: a learner actor without one is a clear error, no default
        with pytest.raises(ActorStartError, match="needs learner_class"):
            client.create_actor(LEARNER_CLASS, name="cfg/learner/8", max_restarts=0,
                                kwargs={**kwargs, "learner_class": ""}, resources={"cpu": 0.5})
        assert algo.train()["num_learners"] == 1
    finally:
        algo.stop()


def test_below_min_learners_training_pauses_then_ends_cleanly_with_a_checkpoint(client, tmp_path):
    cfg = _config(2, min_learners=2, max_num_learner_restarts=0, learner_wait_timeout_s=4.0)
    cfg.checkpointing(checkpoint_interval=0)
    algo = cfg.build(client=client, job_name="minl", output_dir=tmp_path)

    def on_result(result: dict) -> None:
        if result["iteration"] == 2:
            os.kill(_pid(client, "minl/learner/1"), signal.SIGKILL)

    try:
        summary = algo.run(StopCriteria(stop_iters=50), on_result=on_result)
    finally:
        algo.stop()
    assert summary["stop_reason"] == "learner_wait_timeout"
    assert "learner_wait_timeout_s" in summary["error"]
    assert summary["iteration"] >= 2 and summary["checkpoint"]
    assert client.actor("minl/learner/1")["state"] == "DEAD"


def test_resume_with_another_number_of_learners(client, tmp_path):
    cfg = _config(2)
    cfg.checkpointing(checkpoint_interval=1)
    algo = cfg.build(client=client, job_name="res", output_dir=tmp_path)
    try:
        algo.run(StopCriteria(stop_iters=2))
        version, saved = algo.get_weights()
    finally:
        algo.stop()
    wait_until(lambda: all(a["state"] == "DEAD" for a in client.actors("res/learner/")), timeout=30)
    again = _config(3).build(client=client, job_name="res", output_dir=tmp_path, resume=True)
    try:
        assert again.iteration == 2
        v, weights = again.get_weights()
        assert v == version and (weights == saved).all()
        result = again.train()
        assert result["iteration"] == 3 and result["num_learners"] == 3
        assert result["weights_version"] == version + 1
        _identical(again)
    finally:
        again.stop()


def test_training_goes_on_while_the_coordinator_is_down_and_the_mesh_reforms_after(make_cluster):
    cl = make_cluster(workers=1, slots=6, actor_hang_timeout=120.0)
    client = cl.client()
    algo = _config(2).build(client=client, job_name="coord")
    try:
        first = algo.train()
        cl.coordinator_proc.send_signal(signal.SIGKILL)
        cl.coordinator_proc.wait(10)
        # the data plane (runner samples, gloo all-reduce, weights) needs no coordinator
        down = [algo.train() for _ in range(2)]
        assert [r["weights_version"] for r in down] == [first["weights_version"] + 1, first["weights_version"] + 2]
        assert all(r["num_learners"] == 2 and r["mesh_epoch"] == first["mesh_epoch"] for r in down)
        cl.start_coordinator()
        cl.wait_nodes(["local-0"], timeout=60)
        # the restarted coordinator knows no mesh: the learners join again and the
        # group re-forms in a newer epoch (epochs never go back)
        back = _train_until(algo, lambda r: r["mesh_epoch"] > first["mesh_epoch"] and r["num_learners"] == 2,
                            max_iters=40)
        assert back["weights_version"] > down[-1]["weights_version"]
        _identical(algo)
    finally:
        algo.stop()


def test_ftrl_status_shows_the_learner_group_and_its_epoch(cluster, client):
    import json

    from tests.integration.cli.test_cli import run_ftrl

    algo = _config(2).build(client=client, job_name="shown")
    try:
        result = algo.train()
        args = ("--coordinator", cluster.address, "--token-file", str(cluster.token_file))
        table = run_ftrl("status", *args)
        assert table.returncode == 0, table.stderr
        row = next(line for line in table.stdout.splitlines() if line.startswith("shown/learner "))
        assert row.split()[1] == str(result["mesh_epoch"]) and row.split()[2] == "2"
        assert "0:" in row and "1:" in row  # ranks
        data = json.loads(run_ftrl("status", "--json", *args).stdout)
        group = next(g for g in data["learner_groups"] if g["group"] == "shown/learner")
        assert group["epoch"] == result["mesh_epoch"]
        assert [m["rank"] for m in group["members"]] == [0, 1]
    finally:
        algo.stop()
