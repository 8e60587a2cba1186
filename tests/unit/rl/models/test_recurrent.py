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
        actions, states = algo.compute_actions([obs, obs], np.stack([state, state_1]), prev_action=[0, action],
                                               prev_reward=[0.0, 1.0])
        assert len(actions) == 2 and states.shape == (2, 16) and np.allclose(states[0], state_1)
        with pytest.raises(ValueError, match=r"shape \(2, 3\)"):
            algo.compute_actions([obs, obs], np.zeros((2, 3)))
    finally:
        algo.stop()
    with pytest.raises(ConfigError, match=r"no get_initial_state.*use_lstm=True"):
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


CUSTOM_RNN = {"custom_model": "tests.custom_models:RecurrentNet", "custom_model_config": {"hidden": 6},
              "max_seq_len": 3}


def test_a_custom_recurrent_model_unrolls_in_episode_pieces_to_the_runners_own_log_probs():
    from ftrl.rl.algorithms.ppo import compute_gae
    from ftrl.rl.algorithms.ppo_sequences import evaluate_masked, sequence_batch

    r = runner(model=CUSTOM_RNN, envs=3, frag=7, episode_len=4)  # episodes end inside fragments and windows
    try:
        fragments = [r.sample()["batch"] for _ in range(3)]
        weights = r.get_weights()[1]
    finally:
        r.stop()
    start = np.concatenate([np.zeros(6), np.full(6, 0.5)])  # get_initial_state(): h 0, c 0.5
    assert fragments[0]["state_in"].shape == (3, 3, 12)
    assert np.allclose(fragments[0]["state_in"][:, 0], start)
    assert not np.allclose(fragments[1]["state_in"][:, 0], start)  # carried across fragments
    # episodes of 4 steps start at steps 0, 4, 8, ...; fragment 2's third window starts at step 14 + 6 = 20
    assert np.allclose(fragments[2]["state_in"][:, 2], start)
    model = build_model(r.spec, ModelConfig(**CUSTOM_RNN))
    assert model.recurrent and np.allclose(model.initial_state(2).numpy(), start)
    model.set_flat(weights)
    for batch in time_major(fragments, torch.device("cpu")):  # IMPALA/APPO: whole fragments
        with torch.no_grad():
            logp, entropy, values = evaluate_time_major(model, batch)
        assert torch.allclose(logp, batch["logp"], atol=1e-5), (logp - batch["logp"]).abs().max()
        assert torch.allclose(values, batch["values"], atol=1e-5)
    spec = r.spec
    batch = sequence_batch(fragments, PPOConfig().training_cfg, 3, compute_gae, torch.device("cpu"), spec.obs_dim,
                           spec.action_row_shape, spec.action_dtype, 12)
    with torch.no_grad():  # PPO: windows of max_seq_len from the noted states
        logp, entropy, values, flat = evaluate_masked(model, batch)
    assert torch.isfinite(entropy).all()
    assert torch.allclose(logp, flat["logp"], atol=1e-5) and torch.allclose(values, flat["values"], atol=1e-5)


def test_episode_pieces_cut_each_column_after_its_ended_steps():
    from ftrl.rl.models.recurrent import episode_pieces

    ended = torch.tensor([[False, True], [True, False], [False, False], [False, True]])  # [T=4, B=2]
    p = episode_pieces(ended)
    # column 0: steps 0-1 | 2-3; column 1: step 0 | 1-3
    assert p.count == 4 and p.longest == 3
    assert p.lengths.tolist() == [2, 2, 1, 3] and p.first.tolist() == [0, 2, 4, 5]
    assert p.slot.tolist() == [0, 1, 3, 4, 6, 9, 10, 11]


@pytest.mark.parametrize("model, message", [
    ({**CUSTOM_RNN, "use_lstm": True}, "keeps a state of its own.*use_lstm=True"),
    ({**CUSTOM_RNN, "lstm_use_prev_reward": True}, "lstm_use_prev_reward=True belongs to use_lstm"),
    ({**CUSTOM_RNN, "custom_model": "tests.custom_models:RecurrentNoState"}, "returned no tensor"),
    ({**CUSTOM_RNN, "custom_model": "tests.custom_models:RecurrentWrongState"}, r"returned \[\(2, 3, 2\), \(2, 3\)"),
    ({"custom_model": "tests.custom_models:StatefulNet"}, "no get_initial_state"),
])
def test_bad_custom_recurrent_models_are_config_errors(model, message):
    r = runner(envs=1)
    r.stop()
    with pytest.raises(ConfigError, match=message):
        build_model(r.spec, ModelConfig(**model))


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
@pytest.mark.parametrize("model", [LSTM, {**CUSTOM_RNN, "custom_model_config": {"hidden": 4}}])
def test_an_exported_recurrent_policy_carries_its_state_as_compute_single_action_does(tmp_path, fmt, model):
    from ftrl.rl.models.export import load_exported

    if fmt == "onnx":
        pytest.importorskip("onnxruntime")
    cfg = (PPOConfig().environment(REPEAT, env_config={"episode_len": 6})
           .env_runners(num_env_runners=0, num_envs_per_env_runner=2)
           .training(train_batch_size=64, minibatch_size=32, model=model).debugging(seed=0))
    algo = cfg.build(output_dir=tmp_path)
    try:
        algo.train()  # weights that are not the initial ones
        path = algo.export_policy(tmp_path / "out", format=fmt)
        start = np.load(tmp_path / "out" / "initial_state.npy")
        assert np.allclose(start, algo.get_initial_state())
        run = load_exported(path)
        rng = np.random.default_rng(3)
        state, exported_state = algo.get_initial_state(), start[None]
        action, reward = 0, 0.0
        for _ in range(6):  # one episode: the exported graph and ftrl act alike, carrying their states
            obs = rng.random(3).astype(np.float32)
            _, exported_action, exported_state = run(obs[None], exported_state, np.array([action]),
                                                          np.array([reward], np.float32))
            action, state = algo.compute_single_action(obs, state, prev_action=action, prev_reward=reward)
            assert int(exported_action[0]) == action
            assert np.allclose(exported_state[0], state, atol=1e-5)
            reward = 1.0
    finally:
        algo.stop()
