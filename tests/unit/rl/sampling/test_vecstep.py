"""The EnvRunner's vector step in C (ftrl/rl/sampling/_vecstep.c) against its pure-Python
twin (ftrl.rl.sampling.vector_step.step_envs): every contract test runs on both, both run
side by side on the same generated inputs, the runner gets the same fragments bit for bit
from either, no leaked references, and the C one is built wherever a C compiler is found."""

from __future__ import annotations

import gc
import math
import random
import shutil
import sys

import gymnasium as gym
import numpy as np
import pytest

from ftrl.config import PPOConfig
from ftrl.rl.sampling import env_runner, vector_step
from ftrl.rl.sampling.env_runner import EnvRunner

_TWIN = {"name": "c"}  # the twin `_step_envs()` gives: set per test by the `twin` fixture


def _c_step_envs():
    """The C step; a skip where no C compiler could build it, a failure where one could."""
    try:
        from ftrl.rl.sampling._vecstep import step_envs
    except ImportError:
        if shutil.which("cc") or shutil.which("gcc"):
            raise  # `pip install -e .` should have built it
        pytest.skip("no C compiler on this machine: the runner uses its Python loop")
    return step_envs


def _step_envs():
    """The twin under test (see `twin`): the C step, or its pure-Python twin."""
    return vector_step.step_envs if _TWIN["name"] == "python" else _c_step_envs()


@pytest.fixture(autouse=True, params=["c", "python"])
def twin(request, monkeypatch):
    """Every contract test runs on the C step and on its Python twin (the runner-level
    tests below pin "c": they compare the two themselves)."""
    monkeypatch.setitem(_TWIN, "name", request.param)
    return request.param


@pytest.mark.parametrize("twin", ["c"], indirect=True)
def test_the_runner_uses_the_c_step_unless_told_not_to(monkeypatch, twin):
    step_envs = _c_step_envs()
    assert vector_step.native_step_envs() is step_envs
    assert vector_step.select_step_envs() is step_envs and vector_step.loop_name(step_envs) == "c"
    monkeypatch.setenv("FTRL_PURE_PYTHON", "1")
    assert vector_step.native_step_envs() is None
    assert vector_step.select_step_envs() is vector_step.step_envs
    assert vector_step.loop_name(vector_step.step_envs) == "python"


class Scripted:
    """A step function returning what it is given, in order."""

    def __init__(self, *results):
        self.results = list(results)
        self.actions = []

    def __call__(self, action):
        self.actions.append(action)
        out = self.results.pop(0)
        if isinstance(out, BaseException):
            raise out
        return out


def _call(fns, nxt=None, fast=True, ep_ret=None, fit=None, reset_fns=None, infos=None):
    e = len(fns)
    nxt = np.zeros((e, 3), np.float32) if nxt is None else nxt
    rew, term, trunc = [0.0] * e, [False] * e, [False] * e
    ep_ret = [0.0] * e if ep_ret is None else ep_ret
    fits = []

    def default_fit(out, i, obs, what):
        fits.append((i, what))
        out[i] = np.asarray(obs, np.float32).reshape(3)

    args = (fns, list(range(e)), nxt, rew, term, trunc, ep_ret, fit or default_fit, fast, reset_fns)
    ended, failed, finite, resets = _step_envs()(*args, *(() if infos is None else (infos,)))
    return {"nxt": nxt, "rew": rew, "term": term, "trunc": trunc, "ep_ret": ep_ret, "ended": ended,
            "failed": failed, "finite": finite, "fits": fits, "resets": resets}


def test_writes_rows_rewards_flags_and_ended_in_order():
    f64 = np.array([0.1, 1e-40, 3e38], np.float64)  # casts like numpy: rounding, denormal, near max
    f32 = np.array([1.5, -2.0, 0.25], np.float32)
    fns = [Scripted((f64, 1.0, False, False, {})), Scripted((f32, 2.5, True, False, {})),
           Scripted((f32, -1.0, False, True, {})), Scripted((f64[::-1], 0.0, 1, np.True_, None))]
    r = _call(fns, ep_ret=[1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(r["nxt"], np.stack([f64, f32, f32, f64[::-1]]).astype(np.float32))
    assert r["rew"] == [1.0, 2.5, -1.0, 0.0]
    assert r["ep_ret"] == [2.0, 4.5, 2.0, 4.0]
    assert r["term"] == [False, True, False, True]
    assert r["trunc"] == [False, False, True, True]
    assert r["ended"] == [1, 2, 3]
    assert r["failed"] == [] and r["finite"] is True and r["fits"] == []
    assert [f.actions for f in fns] == [[0], [1], [2], [3]]


def test_anything_but_a_1d_float_row_of_the_right_size_goes_through_fit():
    fns = [Scripted(([1.0, 2.0, 3.0], 1.0, False, False, {})),  # a list
           Scripted((np.array([1, 2, 3]), 1.0, False, False, {})),  # ints
           Scripted((np.ones((1, 3)), 1.0, False, False, {})),  # 2-D
           Scripted((np.ones(3), 1.0, False, False, {}))]  # the fast path
    r = _call(fns)
    assert r["fits"] == [(0, "step"), (1, "step"), (2, "step")]
    np.testing.assert_array_equal(r["nxt"], [[1, 2, 3], [1, 2, 3], [1, 1, 1], [1, 1, 1]])
    slow = _call([Scripted((np.ones(3), 1.0, False, False, {}))], fast=False)
    assert slow["fits"] == [(0, "step")]


def test_a_wrong_size_observation_raises_the_fit_error_even_with_one_element():
    def strict_fit(out, i, obs, what):
        raise ValueError(f"sub-env {i}: {what} returned an observation that does not fit")

    for bad in (np.ones(1), np.ones(4), np.float64(1.0)):
        with pytest.raises(ValueError, match="sub-env 0: step returned"):
            _call([Scripted((bad, 1.0, False, False, {}))], fit=strict_fit)


def test_exceptions_from_step_or_unpack_are_collected_and_others_skip_on():
    boom = RuntimeError("boom")
    fns = [Scripted(boom), Scripted((np.ones(3), 1.0, False, False)),
           Scripted([np.ones(3), 1.0, False, False, {}]),  # a list of 5 unpacks like a tuple
           Scripted((np.ones(3), 1.0, False, False, {}, 0)), Scripted(5)]
    r = _call(fns)
    failed = dict(r["failed"])
    assert sorted(failed) == [0, 1, 3, 4]
    assert failed[0] is boom and boom.__traceback__ is not None
    assert "expected 5, got 4" in str(failed[1]) and isinstance(failed[1], ValueError)
    assert "too many values" in str(failed[3])
    assert isinstance(failed[4], TypeError)
    assert r["rew"] == [0.0, 0.0, 1.0, 0.0, 0.0] and r["ep_ret"] == [0.0, 0.0, 1.0, 0.0, 0.0]


def test_unpacking_reads_like_python_and_no_further():
    taken = []

    def endless():
        while True:
            taken.append(1)
            yield np.ones(3)

    r = _call([Scripted(endless()), Scripted(7)])
    failed = dict(r["failed"])
    assert str(failed[0]) == "too many values to unpack (expected 5)" and len(taken) == 6
    assert str(failed[1]) == "cannot unpack non-iterable int object"


def test_buffers_without_strides_and_views_of_the_rows_being_written():
    import ctypes

    row = (ctypes.c_double * 3)(0.5, 1.5, 2.5)  # exports no strides: contiguous
    r = _call([Scripted((row, 1.0, False, False, {}))])
    np.testing.assert_array_equal(r["nxt"], [[0.5, 1.5, 2.5]])
    nxt = np.arange(6, dtype=np.float32).reshape(2, 3)
    nxt[0] = 1
    expected = nxt.copy()
    expected[1] = nxt.reshape(-1)[2:5]  # numpy's assignment copes with the overlap
    _call([Scripted((nxt[0].copy(), 1.0, False, False, {})),
           Scripted((nxt.reshape(-1)[2:5], 1.0, False, False, {}))], nxt=nxt)
    np.testing.assert_array_equal(nxt, expected)


def test_side_effects_come_in_the_python_loops_order():
    """Observation, then reward, then the done flags: an ambiguous `terminated` raises
    after the row and the return were written, as `if te or tr` does in Python."""
    ep_ret = [1.0]
    nxt = np.zeros((1, 3), np.float32)
    with pytest.raises(ValueError, match="truth value"):
        _call([Scripted((np.ones(3), 2.0, np.array([True, False]), False, {}))], nxt=nxt, ep_ret=ep_ret)
    assert ep_ret == [3.0] and nxt.tolist() == [[1.0, 1.0, 1.0]]


def test_a_reward_that_is_no_float_steps_every_env_and_clears_finite():
    """The Python loop raises only in its finiteness check after every env stepped; the C
    step flags it for the same exact check instead of raising at that env."""
    r = _call([Scripted((np.ones(3), np.array([1.0, 2.0]), False, False, {})),
               Scripted((np.ones(3), 1.0, True, False, {}))])
    assert r["finite"] is False and r["ended"] == [1] and r["ep_ret"][1] == 1.0


def test_lists_changed_by_the_env_raise_index_error_not_crash():
    ep_ret = [0.0, 0.0]
    fns = []

    def shrink(action):
        ep_ret.clear()
        fns.clear()
        return np.ones(3), 1.0, False, False, {}

    fns[:] = [shrink, shrink]
    with pytest.raises(IndexError):
        _step_envs()(fns, [0, 1], np.zeros((2, 3), np.float32), [0.0, 0.0], [False] * 2, [False] * 2,
                     ep_ret, None, True)


def test_base_exceptions_propagate():
    with pytest.raises(KeyboardInterrupt):
        _call([Scripted((np.ones(3), 1.0, False, False, {})), Scripted(KeyboardInterrupt())])


@pytest.mark.parametrize("reward, obs", [(math.nan, np.ones(3)), (math.inf, np.ones(3)),
                                         (1.0, np.array([0.0, np.nan, 0.0])),
                                         (np.float32(np.inf), np.ones(3)),
                                         (1.0, np.array([1e39, 0.0, 0.0]))])  # inf as float32
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # numpy's, on 1e39
def test_non_finite_rewards_or_observations_clear_finite(reward, obs):
    r = _call([Scripted((np.zeros(3), 1.0, False, False, {})), Scripted((obs, reward, False, False, {}))])
    assert r["finite"] is False


def test_non_float_rewards_add_as_python_does():
    rewards = [np.float32(0.1), 1, True, np.float64(0.2)]
    r = _call([Scripted((np.ones(3), x, False, False, {})) for x in rewards], ep_ret=[0.5, 0.5, 0.5, 0.5])
    expected = [0.5 + x for x in rewards]
    assert r["ep_ret"] == expected and [type(x) for x in r["ep_ret"]] == [type(x) for x in expected]
    assert r["rew"] == rewards and r["finite"] is True
    with pytest.raises(TypeError):
        _call([Scripted((np.ones(3), "1", False, False, {}))])


def test_infos_are_kept_only_in_a_list_given_for_them():
    """With `infos` (the runner's episode callbacks) each stepped sub-env's info lands in
    its slot, a failed one's slot keeps what it held, and a reset's info is not kept;
    without it nothing is written anywhere."""
    first = (np.array([7.0, 8.0, 9.0]), {"reset": True})
    fns = [Scripted((np.ones(3), 1.0, False, False, {"a": 1})), Scripted(RuntimeError("boom")),
           Scripted((np.ones(3), 1.0, True, False, {"last": 2}))]
    infos = ["old0", "old1", "old2"]
    r = _call(fns, infos=infos, reset_fns=[None, None, Resets(first)])
    assert infos == [{"a": 1}, "old1", {"last": 2}]
    assert r["resets"] == [(2, None)] and [i for i, _ in r["failed"]] == [1]
    with pytest.raises(TypeError, match="infos must be a list or None"):
        _call([Scripted((np.ones(3), 1.0, False, False, {}))], infos=(None,))
    with pytest.raises(IndexError):
        _call([Scripted((np.ones(3), 1.0, False, False, {})) for _ in range(2)], infos=[None])


def test_bad_arguments_are_refused():
    fn = [Scripted((np.ones(3), 1.0, False, False, {}))]
    with pytest.raises(ValueError, match="float32"):
        _call(fn, nxt=np.zeros((1, 3)))
    with pytest.raises(ValueError, match="C-contiguous"):
        _call(fn, nxt=np.zeros((3, 2), np.float32).T)  # not C-contiguous
    with pytest.raises(ValueError, match="one item per sub-env"):
        _step_envs()(fn, [0, 1], np.zeros((1, 3), np.float32), [0.0], [False], [False], [0.0], None, True)


class Resets:
    """A reset function returning what it is given, in order (and counting its calls)."""

    def __init__(self, *results):
        self.results = list(results)
        self.calls = 0

    def __call__(self):
        self.calls += 1
        out = self.results.pop(0)
        if isinstance(out, BaseException):
            raise out
        return out


def test_an_episode_ended_by_termination_is_reset_in_the_step():
    """Only a clean termination is reset in C: a truncation (its final observation is
    bootstrapped), a non-finite row or reward, or a sub-env without a reset function is
    left to the runner, and the row keeps the step's observation."""
    first = np.array([7.0, 8.0, 9.0])
    step = np.array([1.0, 2.0, 3.0])
    fns = [Scripted((step, 1.0, True, False, {})),  # reset here
           Scripted((step, 1.0, False, True, {})),  # truncated
           Scripted((step, 1.0, True, True, {})),  # both
           Scripted((step, math.nan, True, False, {})),  # non-finite reward
           Scripted((np.array([np.nan, 0, 0]), 1.0, True, False, {})),  # non-finite row
           Scripted((step, 1.0, True, False, {})),  # no reset function
           Scripted((step, 1.0, False, False, {}))]  # not ended
    resets = [Resets((first, {})) for _ in fns]
    r = _call(fns, reset_fns=[*resets[:5], None, resets[6]])
    assert r["resets"] == [(0, None)] and [x.calls for x in resets] == [1, 0, 0, 0, 0, 0, 0]
    np.testing.assert_array_equal(r["nxt"][0], first)
    np.testing.assert_array_equal(r["nxt"][1:4], [step] * 3)
    np.testing.assert_array_equal(r["nxt"][5:], [step] * 2)
    assert r["ended"] == [0, 1, 2, 3, 4, 5] and r["finite"] is False
    assert r["ep_ret"][0] == 1.0 and r["term"][0] is True  # the step's side effects stand
    none = _call([Scripted((step, 1.0, True, False, {}))])  # no reset_fns: the old step
    assert none["resets"] == [] and none["nxt"][0].tolist() == step.tolist()


def test_a_reset_that_fails_is_reported_not_raised():
    boom = RuntimeError("reset boom")
    fns = [Scripted((np.ones(3), 1.0, True, False, {})) for _ in range(5)]
    resets = [Resets(boom), Resets(np.ones(3)),  # no (obs, info) pair
              Resets((np.array([0.0, np.inf, 0.0]), {})),  # non-finite first observation
              Resets(([4.0, 5.0, 6.0], {})),  # a list: through fit, as "reset"
              Resets((np.ones(3) * 2, {}))]
    r = _call(fns, reset_fns=resets)
    outcome = dict(r["resets"])
    assert outcome[0] is boom and boom.__traceback__ is not None
    assert isinstance(outcome[1], ValueError) and str(outcome[1]) == "too many values to unpack (expected 2)"
    assert outcome[2] is False and outcome[3] is None and outcome[4] is None
    assert r["fits"] == [(3, "reset")] and r["finite"] is True and r["failed"] == []
    np.testing.assert_array_equal(r["nxt"][3:], [[4.0, 5.0, 6.0], [2.0, 2.0, 2.0]])

    def ends():
        return Scripted((np.ones(3), 1.0, True, False, {}))

    with pytest.raises(KeyboardInterrupt):  # as for steps
        _call([ends()], reset_fns=[Resets(KeyboardInterrupt())])

    def strict_fit(out, i, obs, what):
        raise ValueError(f"sub-env {i}: {what} returned an observation that does not fit")

    with pytest.raises(ValueError, match="sub-env 0: reset returned"):  # a fit error propagates
        _call([ends()], reset_fns=[Resets((np.ones(4), {}))], fit=strict_fit)
    with pytest.raises(TypeError, match="reset_fns"):
        _call([ends()], reset_fns=(None,))
    with pytest.raises(IndexError):
        _call([ends(), ends()], reset_fns=[None])


def test_no_reference_is_leaked():
    """Reference counts of everything a step touches come back to where they were (a
    fresh exception per failure: re-raising one object grows its traceback)."""
    obs, info, reward, fail = np.ones(3), {"k": 1}, 2.0 ** 0.5, RuntimeError
    results = ((obs, reward, True, False, info),)

    def ok(action):
        return results[0]

    def bad(action):
        raise fail("x")

    def unfit(action):
        return np.ones(5), reward, False, False, info

    def ambiguous(action):
        return obs, reward, np.array([True, True]), False, info

    def short(action):
        return [obs, reward, True, info]

    first = ((obs, info),)

    def reset_ok():
        return first[0]

    def reset_bad():
        raise fail("y")

    def rounds(n):
        for _ in range(n):
            _call([ok, bad, ok])
            for fn in (unfit, ambiguous):
                with pytest.raises(ValueError):
                    _call([ok, fn])
            _call([short, ok])
            _call([ok, ok, ok], reset_fns=[reset_ok, reset_bad, None])
            _call([ok, bad, ok], infos=[None, None, None])

    rounds(100)
    gc.collect()
    watched = (obs, info, reward, fail, ok, bad, unfit, ambiguous, short, reset_ok, reset_bad)  # nothing else holds these
    before, true_before = [sys.getrefcount(x) for x in watched], sys.getrefcount(True)
    rounds(1000)
    gc.collect()
    assert [sys.getrefcount(x) for x in watched] == before
    # True is shared by every thread of the process (some left by other tests): a leak of
    # it per step would add thousands over these 1000 rounds; others move it by a few
    assert abs(sys.getrefcount(True) - true_before) < 200


def _runner(env: str, env_config: dict, envs: int, frag: int, restart: bool = True) -> EnvRunner:
    cfg = (
        PPOConfig()
        .environment(env, env_config=env_config)
        .env_runners(num_envs_per_env_runner=envs, rollout_fragment_length=frag)
        .fault_tolerance(restart_failed_sub_environments=restart)
        .debugging(seed=0)
    )
    return EnvRunner(cfg.to_dict(), set_torch_threads=False)


def _samples(monkeypatch, native_on: bool, env: str, env_config: dict, n: int = 4,
             runner_resets: bool = False) -> list[dict]:
    """`runner_resets`: no resets inside the vector step; every episode end goes the
    runner's own way (`_end_episodes` -> `_reset_env`), as sub-env processes do."""
    monkeypatch.setattr(env_runner, "_step_envs", _c_step_envs() if native_on else vector_step.step_envs)
    if native_on:
        assert vector_step.loop_name(env_runner._step_envs) == "c"
    runner = _runner(env, env_config, envs=6, frag=64)
    if runner_resets:
        monkeypatch.setattr(runner, "_reset_fns", lambda: None)
    try:
        return [runner.sample() for _ in range(n)] + [runner.get_metrics()]
    finally:
        runner.stop()


@pytest.mark.parametrize("twin", ["c"], indirect=True)
@pytest.mark.parametrize("env, env_config", [
    ("CartPole-v1", {}),
    ("ftrl.testing.envs:make_flaky_env", {"fail_every": 37, "max_episode_steps": 20}),
    ("ftrl.testing.envs:make_flaky_env", {"fail_every": 29, "mode": "nan_obs"}),
    ("ftrl.testing.envs:make_flaky_env", {"fail_every": 31, "mode": "nan_reward"}),
    ("ftrl.testing.envs:make_counter_env", {"episode_len": 7, "truncate": True}),
    ("ftrl.testing.envs:make_flaky_env", {"fail_every": 5, "fail_in": "reset"}),
    ("ftrl.testing.envs:make_flaky_env", {"fail_every": 4, "fail_in": "reset", "mode": "nan_obs"}),
])
def test_the_c_and_python_loops_give_the_same_fragments(monkeypatch, env, env_config):
    """Same seeds, same envs: every array of every fragment, the episodes and the restart
    counts are identical, for the C step, its Python twin, and the runner's own reset path
    at episode ends (sub-env failures in steps and in resets, NaN observations and rewards,
    truncations)."""
    _c_step_envs()  # the extension is there (skips this test where it could not be built)
    c = _samples(monkeypatch, True, env, env_config)
    # the Python twin resetting in the step, and the runner's own reset path (no step resets)
    for other in (_samples(monkeypatch, False, env, env_config),
                  _samples(monkeypatch, False, env, env_config, runner_resets=True)):
        for a, b in zip(c[:-1], other[:-1], strict=True):
            assert a["batch"].keys() == b["batch"].keys()
            for key in a["batch"]:
                np.testing.assert_array_equal(a["batch"][key], b["batch"][key], err_msg=key)
            np.testing.assert_array_equal(a["episodes"]["returns"], b["episodes"]["returns"])
            np.testing.assert_array_equal(a["episodes"]["lengths"], b["episodes"]["lengths"])
        assert c[-1]["num_sub_env_restarts"] == other[-1]["num_sub_env_restarts"]
    if "fail_every" in env_config:
        assert c[-1]["num_sub_env_restarts"] > 0


@pytest.mark.parametrize("twin", ["c", "python"], indirect=True)
def test_the_runner_still_steps_gymnasium_envs_through_their_wrappers(monkeypatch, twin):
    """`step_fns` are the envs' own `step` (TimeLimit and the rest apply): a 10-step limit
    truncates every episode at 10 steps on either vector step."""
    monkeypatch.setattr(env_runner, "_step_envs", _step_envs())
    gym.register("FtrlShortCartPole-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv",
                 max_episode_steps=10)
    try:
        runner = _runner("FtrlShortCartPole-v0", {}, envs=2, frag=40)
        out = runner.sample()
        runner.stop()
    finally:
        gym.registry.pop("FtrlShortCartPole-v0", None)
    assert set(out["episodes"]["lengths"]) <= set(range(1, 11)) and 10 in set(out["episodes"]["lengths"])


# --------------------------------------------------------------------------- the twins side by side


def _generated_case(seed: int) -> dict:
    """Fresh inputs for one vector step, drawn from `seed`: every call builds new objects
    (each twin gets its own), so the two see the same inputs and share nothing. Steps and
    resets return rows of every kind the contract names (float64/float32 rows, lists,
    ints, float16, big-endian, 2-D, the wrong size, NaN/inf, float64 beyond float32),
    rewards of every kind (floats, numpy scalars, ints, bools, NaN/inf, an array, a
    string), flags of every kind (an ambiguous array too), exceptions and malformed
    results; `nxt` starts with stale NaN rows, which only a written row may clear."""
    rng = random.Random(seed)
    e, d = rng.randint(1, 6), 3

    def row() -> object:
        kind = rng.choice(["f64"] * 6 + ["f32"] * 3 + ["list", "ints", "f16", "be", "2d", "nan", "inf", "big", "wrong",
                                                         "scalar"])
        x = [rng.uniform(-2, 2) for _ in range(d)]
        return {
            "f64": lambda: np.array(x), "f32": lambda: np.array(x, np.float32), "list": lambda: x,
            "ints": lambda: np.array([1, 2, 3]), "f16": lambda: np.array(x, np.float16),
            "be": lambda: np.array(x, ">f8"), "2d": lambda: np.array([x]), "nan": lambda: np.array([x[0], np.nan, x[2]]),
            "inf": lambda: np.array([np.inf, x[1], x[2]]), "big": lambda: np.array([1e39, x[1], x[2]]),
            "wrong": lambda: np.ones(rng.choice([1, 4])), "scalar": lambda: np.float64(1.0),
        }[kind]()

    def reward() -> object:
        return rng.choice([rng.uniform(-1, 1)] * 8 + [np.float32(0.25), 2, True, math.nan, -math.inf,
                                                      np.float64(math.inf), np.array([1.0, 2.0]), "1"])

    def flag() -> object:
        return rng.choice([False] * 8 + [True] * 3 + [np.True_, np.False_, 1, 0, np.array([True, False])])

    def step_fn(i: int) -> Scripted:
        kind = rng.choice(["ok"] * 12 + ["raise", "short", "long", "none", "list5"])
        if kind == "ok":
            return Scripted((row(), reward(), flag(), flag(), {}))
        if kind == "raise":
            return Scripted(RuntimeError(f"boom {i}"))
        if kind == "list5":
            return Scripted([row(), reward(), flag(), flag(), None])
        return Scripted({"short": (row(), 1.0, False, False), "long": (row(), 1.0, False, False, {}, 0),
                         "none": None}[kind])

    def reset_fn(i: int) -> Resets | None:
        kind = rng.choice(["ok"] * 6 + ["none", "raise", "single", "nan", "wrong"])
        if kind == "none":
            return None
        return Resets({"ok": (row(), {}), "raise": ValueError(f"reset boom {i}"), "single": np.ones(d),
                       "nan": (np.array([np.nan, 0.0, 0.0]), {}), "wrong": (np.ones(5), {})}[kind])

    nxt = np.array([[rng.uniform(-1, 1) for _ in range(d)] for _ in range(e)], np.float32)
    for i in range(e):
        if rng.random() < 0.2:
            nxt[i, 1] = np.nan  # stale: a sub-env whose step fails leaves it there
    fns = [step_fn(i) for i in range(e)]
    resets = [reset_fn(i) for i in range(e)] if rng.random() < 0.7 else None
    return {"fns": fns, "resets": resets, "nxt": nxt, "ep_ret": [rng.choice([0.0, 1.5, -3.0]) for _ in range(e)],
            "fast": rng.random() < 0.8}


def _run_twin(fn, case: dict) -> dict:
    """One twin on one case: what it returned or raised, and every side effect, in a
    form two runs can be compared by (NaN equal to NaN, exceptions by type and text)."""
    e = len(case["fns"])
    nxt, ep_ret = case["nxt"], case["ep_ret"]
    rew, term, trunc, fits = [0.0] * e, [False] * e, [False] * e, []

    def fit(out, i, obs, what):
        fits.append((i, what))
        out[i] = np.asarray(obs, np.float32).reshape(out.shape[1])  # refuses the wrong size

    def exc(x):
        return (type(x).__name__, str(x))

    try:
        with np.errstate(over="ignore", invalid="ignore"):  # numpy warns (a float64 beyond float32), C does not
            ended, failed, finite, resets = fn(case["fns"], list(range(e)), nxt, rew, term, trunc, ep_ret, fit,
                                               case["fast"], case["resets"])
        result = ("returned", ended, [(i, exc(x)) for i, x in failed], finite,
                  [(i, x if x is None or x is False else exc(x)) for i, x in resets])
    except Exception as x:
        result = ("raised", exc(x))
    return {"result": result, "nxt": nxt.tobytes(), "rew": repr(rew), "ep_ret": repr(ep_ret), "term": term,
            "trunc": trunc, "fits": fits, "actions": [f.actions for f in case["fns"]],
            "reset_calls": [r.calls if r is not None else None for r in case["resets"] or []]}


@pytest.mark.parametrize("twin", ["c"], indirect=True)
def test_both_twins_agree_on_the_same_generated_inputs(twin):
    """The C step and its Python twin, side by side on 600 generated vector steps: the
    same result (ended, failed, finite, resets, or the same exception), the same rows,
    rewards, returns, flags, fit calls, and the same calls to every step and reset."""
    c, py = _c_step_envs(), vector_step.step_envs
    kinds = set()
    for seed in range(600):
        a, b = _run_twin(c, _generated_case(seed)), _run_twin(py, _generated_case(seed))
        assert a == b, f"case {seed}: C {a} vs Python {b}"
        result = a["result"]
        kinds.add(result[0])
        if result[0] == "returned":
            kinds.update(("failed",) * bool(result[2]) + ("not finite",) * (not result[3]) +
                         tuple(("reset", "ok" if x is None else "nan" if x is False else "raised") for _, x in result[4]))
    # the generator reaches every branch of the contract
    assert {"returned", "raised", "failed", "not finite", ("reset", "ok"), ("reset", "nan"),
            ("reset", "raised")} <= kinds, kinds
