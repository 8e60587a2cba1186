"""IMPALA / APPO on real processes: learning under a runner SIGKILL every second, a
killed driver and a killed learner; the deterministic lag-1 mode twice; the policy-lag
bound; the queue bound under a slow learner; unusable fragments dropped and counted."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ftrl.config import APPOConfig, IMPALAConfig
from tests.cluster import running_train, wait_until
from tests.integration.rl.chaos import sigkill_a_runner_every_second
from tests.integration.rl.test_train_driver import _actors, _iterations
from tests.procs import REPO

APPO_JOB = REPO / "examples" / "cartpole_appo.toml"


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.endswith("}")]


def _train(out: Path, job: str, *extra: str):
    argv = [sys.executable, "-m", "ftrl", "train", "--config", str(APPO_JOB), "--output", str(out),
            "--job-name", job, "--seed", "1", "--quiet", *extra]
    return running_train(argv)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_appo_reaches_475_while_a_runner_is_sigkilled_every_second(tmp_path):
    out, job = tmp_path / "run", "ak"
    # The example anneals lr to 0 at 150k steps; with a runner lost every second about one
    # run in nine had not reached 475 by then and froze below it for good (on c79197e too),
    # so here lr ends at a tenth of its start instead and a slowed run goes on learning.
    with _train(out, job, "--num-env-runners", "2", "--stop-reward", "475", "--stop-timesteps", "1500000",
                "--set", "lr_schedule=[[0, 0.002], [150000, 0.0002]]") as proc:
        wait_until(lambda: (out / "metrics.jsonl").exists(), timeout=120, what="the first row")
        kills = sigkill_a_runner_every_second(proc, job, 200)
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["stop_reason"] == "stop_reward" and result["episode_return_mean"] >= 475
    rows = _rows(out)
    assert kills >= 3
    assert rows[-1]["num_env_runner_restarts"] >= kills // 2
    # a kill mid-fragment loses that fragment (counted, never half-used); a kill of a runner
    # waiting for the learner (back-pressure) loses none
    assert 0 <= rows[-1]["num_samples_lost"] <= kills
    assert rows[-1]["num_env_runner_failures"] >= kills // 2
    # the learner never stopped: every reporting window has updates
    assert all(r["num_learner_updates_this_iter"] >= 1 for r in rows)
    assert all(r["policy_lag_max"] is None or r["policy_lag_max"] <= 20 for r in rows)


@pytest.mark.timeout(300)
def test_appo_runners_sampling_when_asked_learn_too(tmp_path):
    """`sample_ahead=false`: the runners sample only when asked (the other path)."""
    out, job = tmp_path / "run", "as"
    with _train(out, job, "--num-env-runners", "2", "--set", "sample_ahead=false", "--stop-reward", "150",
                "--stop-timesteps", "400000") as proc:
        _, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr[-3000:]
    rows = _rows(out)
    assert rows[-1]["episode_return_mean"] >= 150 and rows[-1]["num_samples_lost"] == 0
    assert all(r["num_learner_updates_this_iter"] >= 1 for r in rows)


@pytest.mark.timeout(300)
def test_appo_with_one_sub_env_and_20_step_fragments_gets_several_to_a_reply(tmp_path):
    """IMPALA's unroll of 20 with one sub-env a runner: 7 fragments to a request
    (MIN_STEPS_PER_REQUEST 128), side by side; a runner SIGKILLed meanwhile loses its
    request's fragments whole (counted), never part of them."""
    out, job = tmp_path / "run", "a20"
    with _train(out, job, "--num-env-runners", "2", "--set", "num_envs_per_env_runner=1",
                "--set", "rollout_fragment_length=20", "--stop-reward", "100", "--stop-timesteps", "400000") as proc:
        wait_until(lambda: (out / "metrics.jsonl").exists(), timeout=120, what="the first row")
        kills = sigkill_a_runner_every_second(proc, job, 3)
        _, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr[-3000:]
    rows = _rows(out)
    assert rows[-1]["episode_return_mean"] >= 100 and kills >= 1
    assert rows[-1]["num_samples_lost"] <= kills
    # every sample is whole: 7 fragments x 20 steps x 1 sub-env
    assert all(r["env_steps_sampled"] % 140 == 0 for r in rows), [r["env_steps_sampled"] for r in rows]


@pytest.mark.timeout(300)
def test_killed_appo_driver_reattaches_and_goes_on(tmp_path):
    out, job = tmp_path / "run", "ad"
    with _train(out, job, "--num-env-runners", "2", "--set", "checkpoint_interval=3",
                "--set", "min_time_s_per_iteration=0.2", "--stop-iters", "25", "--stop-reward", "1000") as proc:
        wait_until(lambda: len(list((out / "checkpoints").glob("checkpoint_*.ftrl"))) >= 2, timeout=120,
                   what="two checkpoints")
        before = _actors(job)
        os.kill(before[f"{job}/algorithm"], signal.SIGKILL)
        _, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr[-3000:]
    assert "driver restarted (incarnation 2)" in stderr
    assert _iterations(out) == list(range(1, 26))  # never backwards, never repeated
    rows = _rows(out)
    trained = [r["env_steps_trained"] for r in rows]
    assert trained == sorted(trained) and rows[-1]["weights_version"] > rows[0]["weights_version"]


@pytest.mark.timeout(300)
def test_appo_on_two_learners_survives_a_learner_sigkill_without_applying_an_update_twice(tmp_path):
    """With the KL loss and a target update every update, each update all-reduces the
    gradient and the KL (the coefficient's rule), so the kill lands in one or the other."""
    out, job = tmp_path / "run", "al"
    with _train(out, job, "--num-env-runners", "1", "--num-learners", "2",
                "--set", "min_time_s_per_iteration=0.3", "--set", "use_kl_loss=true",
                "--set", "target_network_update_freq=1", "--stop-iters", "20", "--stop-reward", "1000") as proc:
        wait_until(lambda: len(_iterations(out)) >= 4, timeout=180, what="four iterations")
        learners = {n: p for n, p in _actors(job).items() if "/learner/" in n}
        os.kill(learners[f"{job}/learner/1"], signal.SIGKILL)
        _, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr[-3000:]
    rows = _rows(out)
    assert [r["iteration"] for r in rows] == list(range(1, 21))
    # one version per committed update: a retried update is applied once
    # the learner's version after the last update the rows counted (the row's own
    # weights_version is read a moment later: an update that lands in between is counted
    # in the next window, which a run's last row never has)
    counted = next(r["learner"]["weights_version"] for r in reversed(rows) if "weights_version" in r["learner"])
    assert counted == sum(r["num_learner_updates_this_iter"] for r in rows)
    assert 0 <= rows[-1]["weights_version"] - counted <= 1
    assert rows[-1]["num_learners"] == 2 and rows[-1]["mesh_epoch"] > rows[0]["mesh_epoch"]
    coeffs = [r["learner"]["kl_coeff"] for r in rows if "kl_coeff" in r["learner"]]
    assert coeffs and coeffs[-1] != 1.0  # adapted (from its initial 1.0) on the mesh's mean KL


# ---------------------------------------------------------------------------- in one process


def _deterministic_run(make_cluster, name: str, config: APPOConfig | None = None,
                       iterations: int = 8) -> tuple[list[dict], np.ndarray]:
    """`iterations` of `config` (default: CartPole, deterministic) on a cluster of its own:
    the rows and the final weights."""
    client = make_cluster(slots=3).client()
    config = config or (APPOConfig().environment("CartPole-v1")
                        .env_runners(num_env_runners=2, num_envs_per_env_runner=4, rollout_fragment_length=32)
                        .training(deterministic=True, train_batch_size=256, num_epochs=2, minibatch_size=128,
                                  lr=1e-3)
                        .debugging(seed=5))
    algo = config.build(client=client, job_name=name)
    try:
        rows = [algo.train() for _ in range(iterations)]
        return rows, algo.get_weights()[1]
    finally:
        algo.stop()
        client.close()


DETERMINISTIC_KEYS = ("env_steps_sampled", "env_steps_trained", "episodes_total", "episode_return_mean",
                      "weights_version", "policy_lag_min", "policy_lag_max")


@pytest.mark.timeout(240)
def test_deterministic_mode_reproduces_a_run_bit_for_bit(make_cluster):
    first, weights_a = _deterministic_run(make_cluster, "det-a")
    second, weights_b = _deterministic_run(make_cluster, "det-b")
    for a, b in zip(first, second, strict=True):
        assert {k: a[k] for k in DETERMINISTIC_KEYS} == {k: b[k] for k in DETERMINISTIC_KEYS}
        assert a["learner"] == {**b["learner"], "learn_time_s": a["learner"]["learn_time_s"]}
    assert np.array_equal(weights_a, weights_b)
    assert [r["policy_lag_max"] for r in first] == [0] + [1] * 7  # lag exactly 1 after the first
    assert first[-1]["weights_version"] == 8


def _local(cls=APPOConfig, **training):
    return (cls().environment("CartPole-v1")
            .env_runners(num_env_runners=0, num_envs_per_env_runner=8, rollout_fragment_length=32)
            .training(train_batch_size=256, **training)
            .reporting(min_time_s_per_iteration=0.3).debugging(seed=0)).build()


def test_no_used_sample_is_older_than_max_policy_lag():
    algo = _local(max_policy_lag=1, learner_queue_size=4, num_epochs=4)
    try:
        rows = [algo.train() for _ in range(6)]
    finally:
        algo.stop()
    assert all(r["policy_lag_max"] <= 1 for r in rows if r["policy_lag_max"] is not None)
    assert rows[-1]["num_samples_dropped_stale"] > 0  # sampling outran the learner: dropped, counted
    assert rows[-1]["env_steps_dropped_stale"] >= rows[-1]["num_samples_dropped_stale"] * 32
    assert rows[-1]["env_steps_trained"] > 0


def test_a_slow_learner_holds_the_runners_back_and_memory_flat():
    """Back-pressure: with a learner far slower than sampling, what was sampled and not
    trained on (or dropped) stays below the queue, the batch being learned, the batch
    being filled and a fragment, however long it runs."""
    algo = _local(IMPALAConfig, learner_queue_size=2, max_policy_lag=1000)
    update = algo.learner.update

    def slow_update(*args, **kwargs):
        time.sleep(0.05)
        return update(*args, **kwargs)

    algo.learner.update = slow_update
    bound = (2 + 2) * 256 + 8 * 32
    try:
        outstanding = []
        for _ in range(8):
            row = algo.train()
            assert row["learner_queue_depth"] <= 2
            outstanding.append(row["env_steps_sampled"] - row["env_steps_trained"] - row["env_steps_dropped_stale"])
    finally:
        algo.stop()
    assert max(outstanding) <= bound, outstanding
    assert row["env_steps_trained"] >= 8 * 256  # it kept learning all along


def test_fragments_with_nan_are_dropped_and_counted_and_the_learner_goes_on():
    algo = _local(IMPALAConfig)
    sample = algo.local_runner.sample
    calls = {"n": 0}

    def poisoned_sample(*args, **kwargs):
        result = sample(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] % 3 == 0:
            result["batch"]["rewards"][0, 0] = np.nan
        return result

    algo.local_runner.sample = poisoned_sample
    try:
        rows = [algo.train() for _ in range(3)]
        weights = algo.get_weights()[1]
    finally:
        algo.stop()
    assert rows[-1]["num_samples_invalid"] >= calls["n"] // 3 - 1 > 0
    assert np.isfinite(weights).all()
    assert rows[-1]["env_steps_trained"] > 0


@pytest.mark.timeout(240)
def test_appo_loses_the_node_of_half_its_runners_and_gets_them_back(make_cluster):
    """A worker with half the runners is SIGKILLed: the learner never stops (every window
    has updates), the runners are re-placed on the other node, and sampling comes back."""
    from ftrl.config import load_job

    cluster = make_cluster(workers=2, slots=4)
    client = cluster.client()
    config = load_job(APPO_JOB).config
    config.env_runners(num_env_runners=4).reporting(min_time_s_per_iteration=0.5).debugging(seed=0)
    algo = config.build(client=client, job_name="appo-node")

    def runners() -> list[dict]:
        return [a for a in client.actors() if a["name"].startswith("appo-node/env_runner/")]

    try:
        before = [algo.train() for _ in range(3)]
        by_node: dict[str, list[str]] = {}
        for a in runners():
            by_node.setdefault(a["node_id"], []).append(a["name"])
        victim = max(by_node, key=lambda n: len(by_node[n]))
        moved = set(by_node[victim])
        os.kill(cluster.worker_procs[victim].pid, signal.SIGKILL)
        during: list[dict] = []

        def all_back_elsewhere() -> bool:
            during.append(algo.train())
            placed = {a["name"]: a for a in runners()}
            return (algo.env_runner_group.num_healthy == 4
                    and all(placed[n]["node_id"] != victim and placed[n]["state"] == "ALIVE" for n in moved))

        wait_until(all_back_elsewhere, timeout=120, interval=0.0, what="runners re-placed off the killed worker")
        after = [algo.train() for _ in range(3)]
    finally:
        algo.stop()
    assert all(r["num_learner_updates_this_iter"] >= 1 for r in before + during + after)
    rate = lambda rows: sum(r["env_steps_sampled_this_iter"] for r in rows) / sum(r["time_this_iter_s"] for r in rows)  # noqa: E731
    assert rate(after) >= 0.5 * rate(before), (rate(before), rate(after))
    assert after[-1]["num_env_runner_failures"] >= len(moved)


def test_a_failing_sub_env_is_restarted_alone_and_appo_goes_on():
    """A sub-env that raises every 150 steps is rebuilt in place (its runner, the other
    sub-envs and the learner go on); its unfinished step is never learned on."""
    config = (APPOConfig().environment("ftrl.testing.envs:make_flaky_env", env_config={"fail_every": 150})
              .env_runners(num_env_runners=0, num_envs_per_env_runner=4, rollout_fragment_length=32)
              .fault_tolerance(restart_failed_sub_environments=True)
              .training(train_batch_size=256).reporting(min_time_s_per_iteration=0.3).debugging(seed=0))
    algo = config.build()
    try:
        rows = [algo.train() for _ in range(3)]
        weights = algo.get_weights()[1]
    finally:
        algo.stop()
    assert rows[-1]["num_sub_env_restarts"] >= 4
    assert all(r["num_learner_updates_this_iter"] >= 1 for r in rows)
    assert rows[-1]["num_samples_invalid"] == 0 and np.isfinite(weights).all()
