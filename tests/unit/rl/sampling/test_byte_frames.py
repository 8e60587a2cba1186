"""Pixels stay uint8 end to end: in the runner's buffers, in fragments, on the wire and in
the learner's host batch; they become float on the learner's device, and a learner update
on uint8 frames is the update on the same frames as float32."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ftrl.config import APPOConfig, IMPALAConfig, PPOConfig
from ftrl.rl.algorithms.appo import APPOLearner
from ftrl.rl.algorithms.impala import IMPALALearner, time_major
from ftrl.rl.algorithms.ppo import PPOLearner, train_batch
from ftrl.rl.learning.learner import join_bytes
from ftrl.rl.sample_batch import BYTES_KEY, check_fragment, pack_bytes
from ftrl.rl.sampling import vector_step
from ftrl.rl.sampling.env_runner import EnvRunner
from ftrl.wire import codec

PIXEL_ENV = "ftrl.testing.envs:make_pixel_env"
FRAME = 36 * 36 * 3  # PixelEnv's (36, 36, 3) uint8 frame


def _config(cls=PPOConfig, envs: int = 4, steps: int = 16, **env_runners):
    return (cls().environment(PIXEL_ENV, env_config={"episode_len": 7})
            .env_runners(num_envs_per_env_runner=envs, rollout_fragment_length=steps, **env_runners)
            .training(train_batch_size=envs * steps)
            .debugging(seed=3))


def _sample(cfg, n: int = 1, weights=None) -> list[dict]:
    runner = EnvRunner(cfg, set_torch_threads=False)
    try:
        if weights is not None:
            runner.set_weights(*weights)
        return [runner.sample() for _ in range(n)]
    finally:
        runner.stop()


def test_a_pixel_fragment_is_bytes_in_the_runner_and_on_the_wire():
    result = _sample(_config(envs=4, steps=16))[0]
    obs = result["batch"]["obs"]
    assert obs.dtype == np.uint8 and obs.shape == (16, 4, FRAME)
    assert obs.nbytes == 16 * 4 * FRAME  # 1 byte a pixel (float32 was 4)
    assert obs.max() == 255  # the dot's red channel: the frames themselves, not a scaled copy
    wire = len(codec.encode(result))
    others = sum(v.nbytes for k, v in result["batch"].items() if k != "obs")
    assert obs.nbytes < wire < obs.nbytes + others + 16_384  # the frames once, as bytes, plus small keys
    decoded = codec.decode(codec.encode(result))["batch"]["obs"]
    assert decoded.dtype == np.uint8 and np.array_equal(decoded, obs)


def test_a_filtered_pixel_fragment_is_float():
    """A MeanStdFilter changes the pixels: those rows are float32 (the filter's output)."""
    obs = _sample(_config(observation_filter="MeanStdFilter"))[0]["batch"]["obs"]
    assert obs.dtype == np.float32


@pytest.mark.parametrize("pure_python", [False, True])
def test_the_vector_step_twins_write_uint8_rows_through_the_encoder(pure_python):
    step = vector_step.step_envs if pure_python else vector_step.native_step_envs()
    if step is None:
        pytest.skip("the C vector step is not built")
    frames = [np.full(6, 7 * i, np.uint8) for i in range(3)]
    written: list[tuple[int, str]] = []

    def fit(out, i, o, what):
        written.append((i, what))
        out[i] = np.asarray(o).reshape(-1)

    fns = [lambda a, f=f: (f, 1.0, a == 1, False, {}) for f in frames]
    resets = [lambda f=f: (f + 1, {}) for f in frames]
    nxt = np.zeros((3, 6), np.uint8)
    ended, failed, finite, reset = step(fns, [0, 1, 0], nxt, [0.0] * 3, [False] * 3, [False] * 3, [0.0] * 3,
                                        fit, True, resets)
    assert ended == [1] and failed == [] and finite and reset == [(1, None)]
    assert written == [(0, "step"), (1, "step"), (1, "reset"), (2, "step")]  # never the float fast copy
    assert nxt.tolist() == [[0] * 6, [8] * 6, [14] * 6]
    with pytest.raises(ValueError, match="float32 or uint8"):
        step(fns, [0, 0, 0], np.zeros((3, 6), np.int16), [0.0] * 3, [False] * 3, [False] * 3, [0.0] * 3, fit, True)


def test_the_host_batches_keep_bytes_and_the_model_reads_floats():
    fragments = [r["batch"] for r in _sample(_config(), n=2)]
    batches = time_major(fragments, torch.device("cpu"))
    assert batches[0]["obs"].dtype == torch.uint8
    cfg = _config()
    spec = _spec(cfg)
    flat = train_batch(fragments, cfg.training_cfg, spec, torch.device("cpu"))
    assert flat["obs"].dtype == torch.uint8 and flat["obs"].shape == (2 * 16 * 4, FRAME)


def _spec(cfg):
    runner = EnvRunner(cfg, set_torch_threads=False)
    try:
        return runner.spec
    finally:
        runner.stop()


def _as_float(fragments: list[dict]) -> list[dict]:
    return [{**f, "obs": f["obs"].astype(np.float32)} for f in fragments]


@pytest.mark.parametrize("cls,learner_cls,model", [
    (PPOConfig, PPOLearner, {}),
    (IMPALAConfig, IMPALALearner, {}),
    (APPOConfig, APPOLearner, {}),
    (IMPALAConfig, IMPALALearner, {"use_lstm": True, "lstm_cell_size": 16}),
])
def test_an_update_on_uint8_frames_is_the_update_on_float_frames(cls, learner_cls, model):
    cfg = _config(cls).training(model=model, **({"minibatch_size": 32, "num_epochs": 2} if cls is PPOConfig else {}))
    spec = _spec(cfg)
    learners = [learner_cls(cfg, spec, seed=5) for _ in range(2)]
    before = learners[0].get_weights()[1].copy()
    fragments = [r["batch"] for r in _sample(cfg, n=2, weights=learners[0].get_weights())]
    assert fragments[0]["obs"].dtype == np.uint8
    torch.manual_seed(0)
    on_bytes = learners[0].update(fragments)
    torch.manual_seed(0)
    on_floats = learners[1].update(_as_float(fragments))
    for key in ("policy_loss", "vf_loss", "entropy"):
        assert on_bytes[key] == pytest.approx(on_floats[key], abs=1e-6, rel=1e-6), key
    after = learners[0].get_weights()[1]
    assert np.abs(after - before).max() > 1e-5  # the update moved the weights
    np.testing.assert_allclose(after, learners[1].get_weights()[1], rtol=0, atol=1e-6)


# ---- the images of a Dict observation: bytes in buffers of their own

DICT_ENV = "ftrl.testing.struct_envs:ImageVectorEnv"  # {"image": uint8 (12, 12, 1), "sign": float (1,)}


def _dict_config(cls=PPOConfig, **env_runners):
    return (cls().environment(DICT_ENV).env_runners(num_envs_per_env_runner=4, rollout_fragment_length=16,
                                                    **env_runners)
            .training(train_batch_size=64).debugging(seed=4))


@pytest.mark.parametrize("observation_filter", ["NoFilter", "MeanStdFilter"])
def test_a_dict_s_image_travels_as_bytes_apart_from_its_vector(observation_filter):
    result = _sample(_dict_config(observation_filter=observation_filter))[0]
    batch = result["batch"]
    assert batch[BYTES_KEY].dtype == np.uint8 and batch[BYTES_KEY].shape == (16, 4, 144)
    assert batch["obs"].dtype == np.float32 and batch["obs"].shape == (16, 4, 1)  # the sign alone
    assert set(np.unique(batch[BYTES_KEY])) == {0, 255}  # the square, unscaled
    if observation_filter == "NoFilter":
        assert set(np.unique(batch["obs"])) == {-1.0, 1.0}
    check_fragment(batch)
    decoded = codec.decode(codec.encode(result))["batch"]
    assert decoded[BYTES_KEY].dtype == np.uint8 and np.array_equal(decoded[BYTES_KEY], batch[BYTES_KEY])
    assert len(codec.encode(result)) < 16 * 4 * 145 * 4 / 2  # not as float32 rows


def test_the_learner_joins_the_columns_back_in_row_order():
    cfg = _dict_config()
    spec = _spec(cfg)
    assert spec.byte_columns == list(range(144))
    rng = np.random.default_rng(0)
    full = np.concatenate([rng.integers(0, 256, (3, 2, 144)).astype(np.float32),
                           rng.normal(size=(3, 2, 1)).astype(np.float32)], axis=-1)
    packed = pack_bytes({"obs": full}, spec.byte_columns)
    assert packed["obs"].shape == (3, 2, 1) and packed[BYTES_KEY].shape == (3, 2, 144)
    joined = join_bytes({k: torch.from_numpy(v) for k, v in packed.items()}, spec)
    assert BYTES_KEY not in joined and torch.equal(joined["obs"], torch.from_numpy(full))
    fragment = _sample(cfg)[0]["batch"]
    for bad in (fragment[BYTES_KEY].astype(np.float32), fragment[BYTES_KEY][:1]):  # a runner's wrong dtype, shape
        with pytest.raises(ValueError, match="obs_bytes has shape"):
            check_fragment({**fragment, BYTES_KEY: bad})


def _unpacked(fragment: dict, spec) -> dict:
    """A packed fragment as one float32 row per step (what it was before `pack_bytes`)."""
    out = {k: v for k, v in fragment.items() if k != BYTES_KEY}
    full = np.empty((*fragment["obs"].shape[:2], spec.obs_dim), np.float32)
    keep = np.ones(spec.obs_dim, bool)
    keep[spec.byte_columns] = False
    full[..., keep] = fragment["obs"]
    full[..., ~keep] = fragment[BYTES_KEY]
    out["obs"] = full
    return out


@pytest.mark.parametrize("cls,learner_cls,model", [
    (PPOConfig, PPOLearner, {}),
    (APPOConfig, APPOLearner, {}),
    (PPOConfig, PPOLearner, {"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 5}),
])
def test_an_update_on_a_dict_s_bytes_is_the_update_on_its_float_rows(cls, learner_cls, model):
    cfg = _dict_config(cls).training(model=model)
    spec = _spec(cfg)
    learners = [learner_cls(cfg, spec, seed=5) for _ in range(2)]
    fragments = [r["batch"] for r in _sample(cfg, n=2, weights=learners[0].get_weights())]
    assert BYTES_KEY in fragments[0]
    torch.manual_seed(0)
    on_bytes = learners[0].update(fragments)
    torch.manual_seed(0)
    on_floats = learners[1].update([_unpacked(f, spec) for f in fragments])
    for key in ("policy_loss", "vf_loss", "entropy"):
        assert on_bytes[key] == pytest.approx(on_floats[key], abs=1e-6, rel=1e-6), key
    np.testing.assert_allclose(learners[0].get_weights()[1], learners[1].get_weights()[1], rtol=0, atol=1e-6)
