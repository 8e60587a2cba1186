"""EnvRunner: fragment layout, reset semantics, episodes across fragments, sub-env
failures with and without restarts, evaluation and weights."""

from __future__ import annotations

import numpy as np
import pytest

from ftrl.config import PPOConfig
from ftrl.rl.sample_batch import TIME_MAJOR_KEYS, check_fragment
from ftrl.rl.sampling import env_runner, vector_step
from ftrl.rl.sampling.env_runner import EnvRunner
from ftrl.rl.sampling.sub_env import SubEnvError
from ftrl.wire import codec
from ftrl.wire.errors import ConfigError

COUNTER = "ftrl.testing.envs:make_counter_env"


@pytest.fixture(autouse=True, params=["c_step", "python_step"])
def step_loop(request, monkeypatch):
    """Every test here runs on the C vector step (ftrl/rl/sampling/_vecstep.c) and on its
    Python twin (ftrl.rl.sampling.vector_step.step_envs)."""
    if request.param == "python_step":
        monkeypatch.setattr(env_runner, "_step_envs", vector_step.step_envs)
    elif env_runner._step_envs is vector_step.step_envs:
        pytest.skip("the C vector step is not built here")
FLAKY = "ftrl.testing.envs:make_flaky_env"


def _runner(env=COUNTER, env_config=None, envs=2, frag=3, restart=False, **runner_kw) -> EnvRunner:
    cfg = (
        PPOConfig()
        .environment(env, env_config=env_config or {})
        .env_runners(num_envs_per_env_runner=envs, rollout_fragment_length=frag, **runner_kw)
        .fault_tolerance(restart_failed_sub_environments=restart)
        .debugging(seed=0)
    )
    return EnvRunner(cfg.to_dict(), set_torch_threads=False)


def test_fragment_layout_is_time_major_and_msgpack_able():
    runner = _runner(env="CartPole-v1", envs=4, frag=5)
    out = runner.sample()
    batch = out["batch"]
    check_fragment(batch)
    assert batch["obs"].shape == (5, 4, 4)
    assert batch["actions"].dtype == np.int64
    for key in TIME_MAJOR_KEYS:
        assert batch[key].shape[:2] == (5, 4), key
    assert out["env_steps"] == 20
    assert out["weights_version"] == -1
    again = codec.decode(codec.encode(out))
    np.testing.assert_array_equal(again["batch"]["obs"], batch["obs"])


def test_same_step_reset_and_episodes_span_fragments():
    runner = _runner(env_config={"episode_len": 5}, envs=2, frag=3)
    obs, term, trunc, returns, lengths, ep_ids = [], [], [], [], [], []
    for _ in range(4):  # 12 steps per env
        out = runner.sample()
        b = out["batch"]
        obs.append(b["obs"][:, 0, 0])
        term.append(b["terminateds"][:, 0])
        trunc.append(b["truncateds"][:, 0])
        ep_ids.append(b["episode_ids"][:, 0])
        returns.extend(out["episodes"]["returns"])
        lengths.extend(out["episodes"]["lengths"])
    obs = np.concatenate(obs)
    term = np.concatenate(term)
    ep_ids = np.concatenate(ep_ids)
    # the row after a terminal step holds the reset observation (same-step reset)
    np.testing.assert_array_equal(obs, [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1])
    np.testing.assert_array_equal(np.flatnonzero(term), [4, 9])
    assert not np.concatenate(trunc).any()
    # an episode keeps its id across fragment boundaries and gets a new one after reset
    assert len(set(ep_ids[0:5])) == 1 and ep_ids[5] != ep_ids[4]
    assert returns == [5.0] * 4 and lengths == [5] * 4  # 2 envs x 2 episodes


@pytest.mark.parametrize("observation_filter", ["NoFilter", "MeanStdFilter"])
def test_fragments_own_their_arrays_and_continue_each_other(observation_filter):
    """Without a filter the envs write straight into the fragment: a returned fragment is
    never written again, and the next one starts where the last one ended."""
    runner = _runner(env_config={"episode_len": 50}, envs=3, frag=4, observation_filter=observation_filter)
    first = runner.sample()["batch"]
    kept = {k: v.copy() for k, v in first.items()}
    second = runner.sample()["batch"]
    for key, value in kept.items():
        np.testing.assert_array_equal(first[key], value, err_msg=key)
    if observation_filter == "NoFilter":  # counter env: obs = step count, one per step
        np.testing.assert_array_equal(first["obs"][:, :, 0], np.tile(np.arange(4.0)[:, None], (1, 3)))
        np.testing.assert_array_equal(second["obs"][:, :, 0], np.tile(np.arange(4.0, 8.0)[:, None], (1, 3)))
    assert not np.shares_memory(first["obs"], second["obs"])
    assert not np.shares_memory(second["obs"], runner._obs) and not np.shares_memory(second["obs"], runner._next_obs)


def test_time_limit_truncation_bootstraps_from_final_observation():
    runner = _runner(env_config={"episode_len": 3, "truncate": True}, envs=1, frag=4)
    out = runner.sample()
    b = out["batch"]
    np.testing.assert_array_equal(b["truncateds"][:, 0], [False, False, True, False])
    assert not b["terminateds"].any()
    expected = runner.policy.value(np.array([[3.0]], np.float32))[0]
    assert expected != 0.0
    assert b["trunc_values"][2, 0] == pytest.approx(expected, rel=1e-5)
    assert b["trunc_values"][0, 0] == 0.0
    assert b["last_values"][0] == pytest.approx(runner.policy.value(np.array([[1.0]], np.float32))[0], rel=1e-5)
    assert list(out["episodes"]["returns"]) == [3.0]


def test_failing_sub_env_is_restarted_alone_and_its_episode_is_cut():
    runner = _runner(
        env=FLAKY, env_config={"fail_every": 37, "scope": "process"}, envs=3, frag=20, restart=True
    )
    invalid = 0
    finished = 0
    reported = 0
    checked = 0
    for _ in range(5):
        out = runner.sample()
        b = out["batch"]
        invalid += int((~b["valid"]).sum())
        done = b["terminateds"] | b["truncateds"]
        ids = b["episode_ids"]
        for t, i in zip(*np.nonzero(~b["valid"]), strict=True):
            if t + 1 < ids.shape[0]:
                assert ids[t + 1, i] != ids[t, i]  # the failed one starts a new episode
                for j in range(ids.shape[1]):
                    if j != i and not done[t, j]:  # the others go on undisturbed
                        assert ids[t + 1, j] == ids[t, j]
                        checked += 1
        # a failed step is marked truncated (episode cut) and invalid
        assert b["truncateds"][~b["valid"]].all()
        finished += int(((b["terminateds"] | b["truncateds"]) & b["valid"]).sum())
        reported += len(out["episodes"]["returns"])
        assert out["num_sub_env_restarts"] == runner.num_sub_env_restarts
    # 300 steps, one failure every 37 calls across the process
    assert runner.num_sub_env_restarts == invalid >= 7
    # cut episodes are never reported as finished
    assert reported == finished
    assert checked > 0
    assert runner.get_metrics()["num_sub_env_restarts"] == invalid


def test_without_restarts_the_error_propagates_then_the_runner_starts_fresh():
    runner = _runner(env=FLAKY, env_config={"fail_every": 10}, envs=2, frag=8, restart=False)
    runner.sample()
    with pytest.raises(SubEnvError, match="flaky env failed"):
        runner.sample()
    out = runner.sample()  # rebuilt the failed sub-envs, fresh episodes
    assert out["batch"]["valid"].all()
    assert runner.num_sub_env_restarts == 0


@pytest.mark.parametrize("mode", ["nan_obs", "nan_reward"])
def test_nan_is_a_clear_error_or_a_sub_env_failure(mode):
    runner = _runner(env=FLAKY, env_config={"fail_every": 4, "mode": mode}, envs=1, frag=6)
    with pytest.raises(SubEnvError, match="NaN"):
        runner.sample()
    runner = _runner(env=FLAKY, env_config={"fail_every": 4, "mode": mode}, envs=1, frag=6, restart=True)
    out = runner.sample()
    assert runner.num_sub_env_restarts >= 1
    assert np.isfinite(out["batch"]["obs"]).all() and np.isfinite(out["batch"]["rewards"]).all()


def test_failing_reset_is_restarted():
    runner = _runner(env=FLAKY, env_config={"fail_every": 2, "fail_in": "reset", "max_episode_steps": 5}, envs=1, frag=12, restart=True)
    out = runner.sample()
    assert runner.num_sub_env_restarts >= 1
    assert out["batch"]["valid"].all()  # a reset failure does not void a step
    assert len(out["episodes"]["returns"]) >= 2


@pytest.mark.parametrize("mode, match", [("raise", "reset raised RuntimeError: flaky env failed"),
                                         ("nan_obs", "observation contains NaN or inf")])
def test_a_reset_failing_when_an_episode_terminates(mode, match):
    """CartPole episodes end by termination, the resets the C step does itself: a failure
    there is the same error (restarts off) or the same restart as a failure of any other
    reset."""
    config = {"fail_every": 3, "fail_in": "reset", "mode": mode}
    runner = _runner(env=FLAKY, env_config=config, envs=2, frag=200)
    with pytest.raises(SubEnvError, match="sub-environment [01]: " + match):
        runner.sample()
    runner = _runner(env=FLAKY, env_config=config, envs=2, frag=200, restart=True)
    out = runner.sample()
    assert runner.num_sub_env_restarts >= 2 and out["sub_env_restarts"] == runner.num_sub_env_restarts
    assert out["batch"]["valid"].all() and np.isfinite(out["batch"]["obs"]).all()
    assert len(out["episodes"]["returns"]) >= 6 and (out["episodes"]["lengths"] < 200).all()


@pytest.mark.parametrize(
    "env, match",
    [
        ("NoSuchEnv-v0", "cannot make environment"),
        ("ftrl.testing.envs:make_broken_env", "on purpose"),
        ("ftrl.testing.envs:make_text_env", "observation space Text"),
    ],
)
def test_bad_envs_raise_config_errors(env, match):
    with pytest.raises(ConfigError, match=match):
        _runner(env=env)


def test_weights_filter_state_and_evaluation():
    runner = _runner(env="CartPole-v1", envs=2, frag=4, observation_filter="MeanStdFilter")
    other = _runner(env="CartPole-v1", envs=2, frag=4)
    _, flat = other.get_weights()
    assert runner.set_weights(7, flat)["weights_version"] == 7
    out = runner.sample()
    assert out["weights_version"] == 7
    assert out["filter_delta"]["stats"]["n"] == 8
    state = runner.get_filter_state()
    assert state["kind"] == "MeanStdFilter" and state["stats"]["n"] == 8
    ev = runner.evaluate(num_episodes=3)
    assert len(ev["returns"]) == 3 and ev["env_steps"] > 0
    assert runner.get_filter_state()["stats"]["n"] == 8  # evaluation does not update the filter
    ev = runner.evaluate(num_timesteps=10)
    assert ev["env_steps"] == 10
    assert runner.ping()["weights_version"] == 7
    runner.stop()


def test_space_spec_mismatch_is_refused():
    spec = _runner(env="CartPole-v1").spec.to_dict()
    cfg = PPOConfig().environment("Pendulum-v1")
    with pytest.raises(ConfigError, match="driver expects"):
        EnvRunner(cfg.to_dict(), space_spec=spec, set_torch_threads=False)


class _ShortObsEnv:
    """Declares Box(3,) but resets to `reset_size` elements and steps to `step_size`
    (default 1 and 1: a buggy env)."""

    @staticmethod
    def make(config: dict):
        import gymnasium as gym

        reset_size, step_size = int(config.get("reset_size", 1)), int(config.get("step_size", 1))

        class Env(gym.Env):
            observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
            action_space = gym.spaces.Discrete(2)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                return np.zeros(reset_size, np.float32), {}

            def step(self, action):
                return np.full(step_size, 0.5, np.float32), 1.0, False, False, {}

        return Env()


make_short_obs_env = _ShortObsEnv.make


def test_an_observation_of_the_wrong_size_is_refused_not_broadcast():
    runner = _runner(env="tests.unit.rl.sampling.test_env_runner:make_short_obs_env", envs=2, frag=2)
    with pytest.raises(ValueError, match="reshape"):
        runner.sample()


@pytest.mark.parametrize("remote", [False, True])
def test_a_step_observation_of_the_wrong_size_is_refused_not_broadcast(remote):
    """A 1-element observation from step() would fill a Box(3,) row by broadcasting: the
    first step of the fragment writes through the encoder and names the sub-env."""
    runner = _runner(env="tests.unit.rl.sampling.test_env_runner:make_short_obs_env", env_config={"reset_size": 3},
                     envs=2, frag=4, remote_worker_envs=remote)
    try:
        with pytest.raises(ConfigError, match=r"sub-env 0: step returned an observation that does not fit.*\(3,\)"):
            runner.sample()
    finally:
        runner.stop()


class _WrongShapeAtEnv:
    """Counter env (obs = step count in each of `size` elements, Box((size,))) whose step
    number `bad_at` returns an observation of the wrong shape, as `bad` says: two
    elements (the default), or one element, a Python float or a numpy scalar, each of which
    a plain row assignment would broadcast into the row. The runner fails with a
    ValueError, not a sub-env error."""

    BAD = {"two_elements": lambda: np.array([1.0, 2.0], np.float32),
           "one_element": lambda: np.array([0.5], np.float32),
           "python_float": lambda: 0.5, "numpy_scalar": lambda: np.float32(0.5)}

    @staticmethod
    def make(config: dict):
        import gymnasium as gym

        bad_at, size = int(config["bad_at"]), int(config.get("size", 1))
        bad = _WrongShapeAtEnv.BAD[config.get("bad", "two_elements")]

        class Env(gym.Env):
            observation_space = gym.spaces.Box(0.0, np.inf, (size,), np.float32)
            action_space = gym.spaces.Discrete(2)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                self.t = 0
                return np.zeros(size, np.float32), {}

            def step(self, action):
                self.t += 1
                obs = bad() if self.t == bad_at else np.full(size, float(self.t), np.float32)
                return obs, 1.0, False, False, {}

        return Env()


make_wrong_shape_at_env = _WrongShapeAtEnv.make


@pytest.mark.parametrize("bad", ["one_element", "python_float", "numpy_scalar"])
def test_a_short_observation_mid_fragment_is_refused_on_both_loops(bad):
    """Past a fragment's first step observations take the loop's fast path (a plain row
    write): a 1-element observation must still be refused, not broadcast into the row."""
    runner = _runner(env="tests.unit.rl.sampling.test_env_runner:make_wrong_shape_at_env",
                     env_config={"bad_at": 3, "bad": bad, "size": 3}, envs=2, frag=5)
    with pytest.raises(ConfigError, match=r"sub-env 0: step returned an observation that does not fit.*\(3,\)"):
        runner.sample()


def test_remote_sub_envs_stay_in_step_after_a_malformed_observation():
    """Remote sub-envs answer each step in order on their own pipe: when one answer is
    malformed, the others of that step are still read, so the next fragment does not
    take a stale answer (both counters stay equal)."""
    runner = _runner(env="tests.unit.rl.sampling.test_env_runner:make_wrong_shape_at_env", env_config={"bad_at": 6},
                     envs=2, frag=4, remote_worker_envs=True)
    try:
        runner.sample()
        with pytest.raises(ConfigError, match="sub-env 0: step returned"):
            runner.sample()  # step 6 is malformed in both sub-envs
        obs = runner.sample()["batch"]["obs"][:, :, 0]
        np.testing.assert_array_equal(obs[:, 0], [5, 7, 8, 9])
        np.testing.assert_array_equal(obs[:, 1], obs[:, 0])
    finally:
        runner.stop()


class _DiscreteObsEnv:
    """Declares Discrete(4) observations; steps return `bad` (outside 0..3)."""

    @staticmethod
    def make(config: dict):
        import gymnasium as gym

        class Env(gym.Env):
            observation_space = gym.spaces.Discrete(4)
            action_space = gym.spaces.Discrete(2)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                return 0, {}

            def step(self, action):
                return int(config["bad"]), 1.0, False, False, {}

        return Env()


make_discrete_obs_env = _DiscreteObsEnv.make


@pytest.mark.parametrize("bad", [-1, 4])
def test_a_discrete_observation_outside_its_space_is_refused(bad):
    """-1 would one-hot the last column (negative index), 4 would raise IndexError."""
    runner = _runner(env="tests.unit.rl.sampling.test_env_runner:make_discrete_obs_env", env_config={"bad": bad}, envs=2, frag=3)
    with pytest.raises(ConfigError, match=rf"sub-env 0: step returned .* observation {bad} is outside Discrete\(4\)"):
        runner.sample()


def test_after_an_unexpected_error_mid_fragment_sampling_goes_on_from_the_failing_step():
    """An error that is not a sub-env failure (here a malformed observation) leaves the
    envs where they are; the next fragment starts from the failing step's observation,
    as it did before observations were written straight into the fragment."""
    runner = _runner(env="tests.unit.rl.sampling.test_env_runner:make_wrong_shape_at_env", env_config={"bad_at": 6},
                     envs=1, frag=4)
    np.testing.assert_array_equal(runner.sample()["batch"]["obs"][:, 0, 0], [0, 1, 2, 3])
    with pytest.raises(ValueError, match="sub-env 0: step returned an observation that does not fit"):
        runner.sample()  # steps 4 and 5 are fine, step 6 is malformed
    np.testing.assert_array_equal(runner.sample()["batch"]["obs"][:, 0, 0], [5, 7, 8, 9])


def test_the_runner_reports_the_loop_that_steps_its_envs(monkeypatch, caplog):
    """`step_loop` (in get_metrics and the start-up log line) names the loop that really
    ran: the C step is called on every vector step, or never."""
    calls = []
    step = env_runner._step_envs
    if step is not vector_step.step_envs:
        def counted(*args):
            calls.append(1)
            return step(*args)

        monkeypatch.setattr(env_runner, "_step_envs", counted)
    with caplog.at_level("INFO", logger="ftrl.rl.sampling.env_runner"):
        runner = _runner(env="CartPole-v1", envs=3, frag=5)
    runner.sample()
    expected = "python" if step is vector_step.step_envs else "c"
    assert len(calls) == (0 if expected == "python" else 5)
    assert runner.step_loop == runner.get_metrics()["step_loop"] == expected
    assert f"3 sub-envs of CartPole-v1, step loop: {expected}" in caplog.text


def test_sub_env_processes_are_reported_as_the_step_loop():
    runner = _runner(env="CartPole-v1", envs=2, frag=2, remote_worker_envs=True)
    try:
        runner.sample()
        assert runner.get_metrics()["step_loop"] == "sub-env processes"
    finally:
        runner.stop()
