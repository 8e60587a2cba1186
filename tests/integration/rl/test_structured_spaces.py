"""Structured spaces on real processes: PPO and APPO learn to pick the marked choice among
those an action mask allows (a MultiDiscrete action of two heads, a Dict observation),
with env runners SIGKILLed every second, and the env, which raises on a masked action,
never sees one; a Dict of an image and a vector is learned (a CNN on the image, an MLP
on the vector); a policy that masks is exported and acts as ftrl does."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from ftrl.config import APPOConfig, PPOConfig, StopCriteria
from ftrl.rl.models.export import load_exported
from ftrl.rl.spaces import ObsEncoder
from ftrl.testing.struct_envs import ImageVectorEnv
from tests.integration.rl.test_rl_training import Killer
from tests.integration.rl.test_videos import _ftrl

MASKED = "ftrl.testing.struct_envs:MaskedChoiceEnv"
HEADS = 2
EPISODE = 20
#: picking uniformly among the allowed choices scores ~1/3 of a head's steps; the
#: marked one every time scores HEADS * EPISODE
LEARNED = 0.8 * HEADS * EPISODE


def rows(path) -> list[dict]:
    return [json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines() if x.strip()]


def masked_job(config):
    return (config.environment(MASKED, env_config={"heads": HEADS, "episode_len": EPISODE})
            .env_runners(num_env_runners=2, num_envs_per_env_runner=8, sample_timeout_s=10.0,
                         env_runner_health_probe_timeout_s=10.0)
            .fault_tolerance(restart_failed_sub_environments=False)  # a masked action would fail the runner
            .debugging(seed=0))


@pytest.mark.parametrize("algo", ["PPO", "APPO"])
def test_a_masked_multidiscrete_policy_learns_on_killed_runners_and_never_acts_masked(make_cluster, tmp_path,
                                                                                      algo):
    cluster = make_cluster(slots=3, preload="ftrl.rl.sampling.env_runner")
    client = cluster.client()
    if algo == "PPO":
        config = masked_job(PPOConfig()).training(train_batch_size=1600, minibatch_size=400, num_epochs=4, lr=3e-3)
    else:
        config = masked_job(APPOConfig()).training(train_batch_size=800, lr=3e-3).env_runners(
            rollout_fragment_length=50)
    config.training(model={"fcnet_hiddens": [64]})
    job = f"masked-{algo.lower()}"
    algo_obj = config.build(client=client, output_dir=tmp_path, job_name=job)
    killer = Killer(client, job, every_s=1.0)
    killer.start()
    learned = threading.Event()

    def on_result(r: dict) -> None:
        if (r["episode_return_mean"] or 0.0) >= LEARNED and killer.kills >= 3:
            learned.set()

    try:
        summary = algo_obj.run(StopCriteria(stop_timesteps=400_000), on_result=on_result, stop_event=learned)
    finally:
        killer.stop_event.set()
        killer.join()
        algo_obj.stop()
    result = summary["result"]
    assert killer.kills >= 3 and result["num_env_runner_restarts"] >= 1
    assert result["episode_return_mean"] >= LEARNED, result
    # the env raises on a masked action: a sub-env failure (restarts are off: the runner's)
    # would show here; runner restarts are the killer's alone
    assert result["num_sub_env_restarts"] == 0
    assert result["num_env_runner_failures"] <= killer.kills
    its_rows = rows(tmp_path)
    assert [r["iteration"] for r in its_rows] == list(range(1, len(its_rows) + 1))
    logs = "".join(p.read_text(errors="replace") for p in (cluster.state_dir / "logs").rglob("*.log"))
    assert "env_runner" in logs and "MaskedActionError" not in logs


def test_a_dict_of_an_image_and_a_vector_is_learned_and_exported(tmp_path):
    config = (PPOConfig().environment("ftrl.testing.struct_envs:ImageVectorEnv")
              .env_runners(num_env_runners=0, num_envs_per_env_runner=16)
              .training(train_batch_size=1600, minibatch_size=400, num_epochs=4, lr=1e-3,
                        model={"post_fcnet_hiddens": [64], "fcnet_hiddens": [16]})
              .debugging(seed=0))
    algo = config.build(output_dir=tmp_path)
    try:
        summary = algo.run(StopCriteria(stop_reward=9.0, stop_timesteps=300_000))
        assert summary["stop_reason"] == "stop_reward", summary["result"]  # seeing one part alone: 5 of 10
        path = algo.export_policy(tmp_path / "exported", "torchscript")
        env = ImageVectorEnv({})
        observations = [env.reset(seed=i)[0] for i in range(64)]
        ours = algo.compute_actions(observations, explore=False)
        encoder = ObsEncoder(algo.spec)
        _, exported = load_exported(path)(np.stack([encoder.encode(o) for o in observations]))
        assert np.asarray(exported).tolist() == [int(a) for a in ours]
    finally:
        algo.stop()


MASKED_JOB = """
algo = "PPO"
[environment]
env = "ftrl.testing.struct_envs:MaskedChoiceEnv"
env_config = {heads = 2, episode_len = 20}
[env_runners]
num_env_runners = 0
num_envs_per_env_runner = 8
[training]
train_batch_size = 1600
minibatch_size = 400
num_epochs = 4
lr = 0.003
[fault_tolerance]
restart_failed_sub_environments = false
[debugging]
seed = 0
"""


def test_ftrl_train_and_evaluate_run_a_masked_policy_from_the_cli(tmp_path):
    job = tmp_path / "masked.toml"
    job.write_text(MASKED_JOB)
    out = tmp_path / "run"
    proc = _ftrl("train", "--config", str(job), "--output", str(out), "--stop-iters", "8", "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert rows(out)[-1]["num_sub_env_restarts"] == 0
    proc = _ftrl("evaluate", str(out), "--episodes", "4", "--seed", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]  # the env raises on a masked action
    result = json.loads(proc.stdout)
    assert result["episodes"] == 4 and result["lengths"] == [EPISODE] * 4
    assert result["episode_return_mean"] >= LEARNED  # greedy, after 8 iterations
