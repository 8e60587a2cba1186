"""use_lstm: the learner's unroll of a fragment gives the runner's own log-probs and values
(the state carried and zeroed at episode ends alike), the fragment's recurrent keys,
state outside training, and the errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ftrl.config import APPOConfig, IMPALAConfig, ModelConfig, PPOConfig
from ftrl.rl.algorithms.impala import evaluate_time_major, time_major
from ftrl.rl.learning.shards import split_fragments
from ftrl.rl.models.factory import build_model
from ftrl.rl.sampling.env_runner import EnvRunner
from ftrl.wire.errors import ConfigError

REPEAT = "ftrl.testing.memory_envs:RepeatFirstEnv"
LSTM = {"use_lstm": True, "lstm_cell_size": 8, "fcnet_hiddens": [16], "lstm_use_prev_action": True,
        "lstm_use_prev_reward": True}


def runner(env: str = REPEAT, model: dict | None = None, envs: int = 3, frag: int = 7,
           **env_config: object) -> EnvRunner:
    cfg = (IMPALAConfig().environment(env, env_config=env_config)
           .env_runners(num_envs_per_env_runner=envs, rollout_fragment_length=frag)
           .training(model=model or LSTM).debugging(seed=0))
    return EnvRunner(cfg.to_dict(), set_torch_threads=False)


@pytest.mark.parametrize("env, env_config", [(REPEAT, {"episode_len": 5}),
                                             ("ftrl.testing.struct_envs:MaskedChoiceEnv", {"heads": 2}),
                                             ("Pendulum-v1", {})])
def test_the_learner_unrolls_a_fragment_to_the_runners_own_log_probs_and_values(env, env_config):
    r = runner(env, **env_config)
    try:
        fragments = [r.sample()["batch"] for _ in range(3)]  # episode ends inside and across fragments
        weights = r.get_weights()[1]
    finally:
        r.stop()
    first = fragments[0]
    assert first["state_in"].shape == (3, 1, 16) and not first["state_in"].any()  # episodes start at zero
    assert fragments[1]["state_in"].any()
    model = build_model(r.spec, ModelConfig(**LSTM))
    model.set_flat(weights)
    for batch in time_major(fragments, torch.device("cpu")):
        with torch.no_grad():
            logp, entropy, values = evaluate_time_major(model, batch)
        assert torch.allclose(logp, batch["logp"], atol=1e-4), (logp - batch["logp"]).abs().max()
        assert torch.allclose(values, batch["values"], atol=1e-4)
        assert torch.isfinite(entropy).all()


def test_a_fragment_starts_from_where_the_last_one_ended_and_episodes_from_zero():
    r = runner(envs=2, frag=3, episode_len=6)  # episodes end exactly at every second fragment's end
    try:
        a = r.sample()["batch"]
        state_after_a = r._rnn_state.copy()
        b = r.sample()["batch"]
        assert a["state_in"].shape == (2, 1, 16) and state_after_a.any()
        assert np.array_equal(b["state_in"][:, 0], state_after_a)
        assert np.array_equal(b["prev_action_in"][:, 0], a["actions"][-1])
        assert np.array_equal(b["prev_reward_in"][:, 0], a["rewards"][-1])
        assert b["terminateds"][-1].all()
        c = r.sample()["batch"]  # new episodes: nothing carried over
        assert not c["state_in"].any() and not c["prev_action_in"].any() and not c["prev_reward_in"].any()
    finally:
        r.stop()


def test_shards_split_the_recurrent_keys_along_the_sub_envs():
    r = runner(envs=4, frag=5)
    try:
        frag = r.sample()["batch"]
    finally:
        r.stop()
    shards = split_fragments([frag], 2)
    pieces = [p for shard in shards for p in shard]
    assert sorted(p["state_in"].shape[0] for p in pieces) == [2, 2]
    rebuilt = np.concatenate([p["state_in"] for p in sorted(pieces, key=lambda p: p["episode_ids"][0, 0])])
    assert np.array_equal(rebuilt, frag["state_in"][np.argsort(frag["episode_ids"][0])])
    for p in pieces:
        assert p["state_in"].shape[0] == p["rewards"].shape[1] == p["prev_action_in"].shape[0]


def test_state_outside_training_and_bad_input(tmp_path):
    cfg = (APPOConfig().environment(REPEAT).env_runners(num_env_runners=0, num_envs_per_env_runner=2)
           .training(train_batch_size=64, model=LSTM).debugging(seed=0))
    algo = cfg.build(output_dir=tmp_path)
    try:
        state = algo.get_initial_state()
        assert state.shape == (16,) and not state.any()
        obs = np.array([1.0, 0.0, 1.0], np.float32)
        action, state_1 = algo.compute_single_action(obs, state)
        assert action in (0, 1) and state_1.shape == (16,) and state_1.any()
        action_2, state_2 = algo.compute_single_action(np.zeros(3, np.float32), state_1, prev_action=action,
                                                       prev_reward=0.0)
        assert action_2 in (0, 1) and not np.array_equal(state_2, state_1)
        assert algo.compute_single_action(obs) in (0, 1)  # from an episode's start
        with pytest.raises(ValueError, match="state has 3 values"):
            algo.compute_single_action(obs, np.zeros(3))
        with pytest.raises(ConfigError, match="recurrent"):
            algo.export_policy(tmp_path / "out")
    finally:
        algo.stop()
    with pytest.raises(ConfigError, match=r"state of its own.*use_lstm=True"):
        build_model(algo.spec, ModelConfig(custom_model="tests.custom_models:StatefulNet", use_lstm=True))
    with pytest.raises(ConfigError, match="max_seq_len"):
        IMPALAConfig().environment(REPEAT).training(model={"use_lstm": True, "max_seq_len": 0}).validate()


def test_ppo_sequences_start_from_the_noted_states_and_give_the_runners_log_probs():
    from ftrl.rl.algorithms.ppo import compute_gae
    from ftrl.rl.algorithms.ppo_sequences import evaluate_masked, sequence_batch

    model_cfg = {**LSTM, "max_seq_len": 3}
    r = runner(model=model_cfg, envs=3, frag=7, episode_len=4)  # 3 sequences a column: 3 + 3 + 1 (padded)
    try:
        fragments = [r.sample()["batch"] for _ in range(2)]
        weights = r.get_weights()[1]
    finally:
        r.stop()
    assert fragments[0]["state_in"].shape == (3, 3, 16)
    spec = r.spec
    batch = sequence_batch(fragments, PPOConfig().training_cfg, 3, compute_gae, torch.device("cpu"), spec.obs_dim,
                           spec.action_row_shape, spec.action_dtype, 16)
    assert tuple(batch["mask"].shape) == (3, 2 * 3 * 3) and int(batch["mask"].sum()) == 2 * 7 * 3
    assert not batch["mask"][1:, -3:].any()  # the last window of each column: one real step
    model = build_model(spec, ModelConfig(**model_cfg))
    model.set_flat(weights)
    with torch.no_grad():
        logp, entropy, values, flat = evaluate_masked(model, batch)
    assert torch.allclose(logp, flat["logp"], atol=1e-4) and torch.allclose(values, flat["values"], atol=1e-4)
    assert logp.shape == (42,) and torch.isfinite(entropy).all()
