"""ftrl.tune.schedulers: FIFO and PBT's pure rules (the exploit that uses them, and PBT on a
toy population, are tests/unit/tune/test_exploit.py)."""

from __future__ import annotations

import json
import math
import random

import pytest

from ftrl.tune.schedulers import (
    FIFOScheduler,
    Member,
    PBTState,
    PopulationBasedTraining,
    checkpoint_usable,
    decide,
    donor_candidates,
    explore,
    quantiles,
    ready,
    record_exploit,
    record_skip,
    scheduler_from_dict,
    synch_ready,
)
from ftrl.tune.search import choice, loguniform, qrandint, quniform, randint, uniform
from ftrl.wire.errors import ConfigError

KEYS = ("lr", "entropy_coeff", "train_batch_size", "optimizer", "gamma", "num_sgd_iter")
HERE = "tests.unit.tune.test_schedulers"


def double_batch(config: dict) -> dict:
    """A custom_explore_fn: doubles the batch size."""
    return {**config, "train_batch_size": config.get("train_batch_size", 1) * 2}


def not_a_dict(config: dict) -> list:
    return [config]


NOT_CALLABLE = 3


def pbt(**kw) -> PopulationBasedTraining:
    kw.setdefault("hyperparam_mutations", {"lr": [0.1, 0.01, 0.001]})
    kw.setdefault("mode", "max")
    return PopulationBasedTraining(**kw)


# --------------------------------------------------------------------------- FIFO and dicts


def test_fifo():
    f = FIFOScheduler()
    f.validate(KEYS)
    assert f.to_dict() == {"kind": "fifo"}
    assert FIFOScheduler.from_dict({"kind": "fifo"}) == f
    assert scheduler_from_dict(json.loads(json.dumps(f.to_dict()))) == f
    with pytest.raises(ConfigError, match="FIFOScheduler has no field 'x'"):
        FIFOScheduler.from_dict({"kind": "fifo", "x": 1})


def test_scheduler_from_dict_kinds():
    assert isinstance(scheduler_from_dict(pbt().to_dict()), PopulationBasedTraining)
    for bad in ({"kind": "asha"}, {}, "pbt"):
        with pytest.raises(ConfigError, match="scheduler kind must be one of fifo, pbt"):
            scheduler_from_dict(bad)


def test_pbt_defaults_follow_tune():
    p = PopulationBasedTraining()
    assert (p.time_attr, p.perturbation_interval, p.burn_in_period) == ("iteration", 10.0, 0.0)
    assert (p.quantile_fraction, p.resample_probability) == (0.25, 0.25)
    assert p.perturbation_factors == (1.2, 0.8)
    assert p.kind == "pbt" and not p.synch and p.checkpoint_lag_limit == 10.0
    assert pbt(max_checkpoint_lag=3).checkpoint_lag_limit == 3


def test_time_attr_aliases():
    assert pbt(time_attr="training_iteration").time_attr == "iteration"
    assert pbt(time_attr="time_total_s").time_attr == "time_s"
    for t in ("iteration", "env_steps_sampled", "time_s"):
        pbt(time_attr=t).validate(KEYS)


def test_pbt_round_trip():
    p = pbt(
        hyperparam_mutations={
            "lr": loguniform(1e-5, 1e-2),
            "entropy_coeff": {"uniform": [0.0, 0.02]},
            "train_batch_size": [256, 512, 1024],
            "optimizer": choice(["adam", "sgd"]),
        },
        time_attr="training_iteration",
        perturbation_interval=5,
        custom_explore_fn=f"{HERE}:double_batch",
        synch=True,
        max_checkpoint_lag=2.0,
        metric="episode_return_mean",
        seed=7,
    )
    p.validate(KEYS)
    d = json.loads(json.dumps(p.to_dict()))
    assert d["kind"] == "pbt" and d["time_attr"] == "iteration"
    assert d["perturbation_factors"] == [1.2, 0.8]
    assert d["hyperparam_mutations"] == {
        "lr": {"__domain__": {"type": "loguniform", "low": 1e-5, "high": 1e-2, "base": 10}},
        "entropy_coeff": {"__domain__": {"type": "uniform", "low": 0.0, "high": 0.02}},
        "train_batch_size": [256, 512, 1024],
        "optimizer": {"__domain__": {"type": "choice", "categories": ["adam", "sgd"]}},
    }
    back = PopulationBasedTraining.from_dict(d)
    assert back.to_dict() == d
    assert back.hyperparam_mutations["entropy_coeff"] == uniform(0.0, 0.02)
    assert back.perturbation_factors == (1.2, 0.8)
    assert back == PopulationBasedTraining(**{**p.__dict__, "hyperparam_mutations": back.mutations()})
    with pytest.raises(ConfigError, match="has no field 'quantile'; did you mean 'quantile_fraction'"):
        PopulationBasedTraining.from_dict({**d, "quantile": 0.2})


def test_pbt_from_a_toml_table():
    table = {"time_attr": "training_iteration", "perturbation_factors": [1.5, 0.5],
             "hyperparam_mutations": {"lr": {"loguniform": [1e-5, 1e-2]}, "gamma": [0.9, 0.99]}}
    p = PopulationBasedTraining.from_dict(table)
    assert p.hyperparam_mutations == {"lr": loguniform(1e-5, 1e-2), "gamma": [0.9, 0.99]}
    assert (p.time_attr, p.perturbation_factors) == ("iteration", (1.5, 0.5))
    p.validate(KEYS)
    with pytest.raises(ConfigError, match=r"hyperparam_mutations\['lr'\]: loguniform low 1 > high"):
        PopulationBasedTraining.from_dict({"hyperparam_mutations": {"lr": {"loguniform": [1, 0.1]}}})


def test_with_metric():
    p = PopulationBasedTraining(hyperparam_mutations={"lr": [1, 2]})
    q = p.with_metric("ret", "max")
    assert (q.metric, q.mode) == ("ret", "max") and p.mode is None
    assert pbt(mode="min").with_metric("ret", None).mode == "min"
    with pytest.raises(ConfigError, match="PBT mode 'min' differs from the TuneConfig's 'max'"):
        pbt(mode="min").with_metric("ret", "max")


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"quantile_fraction": 0}, "quantile_fraction must be in (0, 0.5], got 0"),
        ({"quantile_fraction": 0.6}, "quantile_fraction must be in (0, 0.5], got 0.6"),
        ({"quantile_fraction": "a"}, "quantile_fraction must be a number"),
        ({"resample_probability": -0.1}, "resample_probability must be in [0, 1], got -0.1"),
        ({"resample_probability": 1.5}, "resample_probability must be in [0, 1]"),
        ({"perturbation_interval": 0}, "perturbation_interval must be > 0, got 0"),
        ({"perturbation_interval": -5}, "perturbation_interval must be > 0"),
        ({"burn_in_period": -1}, "burn_in_period must be >= 0, got -1"),
        ({"hyperparam_mutations": {"lrr": [1, 2]}},
         "hyperparam_mutations['lrr']: not a config key; did you mean 'lr'?"),
        ({"hyperparam_mutations": {"lr": []}}, "hyperparam_mutations['lr']: an empty list"),
        ({"hyperparam_mutations": {"lr": {"grid_search": [1, 2]}}},
         "hyperparam_mutations['lr']: grid_search is not a mutation"),
        ({"hyperparam_mutations": {"lr": 0.1}},
         "hyperparam_mutations['lr']: needs a list of values or a domain"),
        ({"hyperparam_mutations": {"lr": {"loguniform": [1, 0.1]}}},
         "hyperparam_mutations['lr']: loguniform low 1 > high 0.1"),
        ({"hyperparam_mutations": {"lr": {"gauss": [1, 0.1]}}},
         "hyperparam_mutations['lr']: {'gauss': [1, 0.1]} is not a search-space form"),
        ({"hyperparam_mutations": [("lr", [1])]}, "hyperparam_mutations must be a table"),
        ({"hyperparam_mutations": {}}, "PBT needs hyperparam_mutations or a custom_explore_fn"),
        ({"mode": "maximize"}, "mode must be 'max' or 'min', got 'maximize'"),
        ({"time_attr": "steps"}, "time_attr 'steps' is not one of iteration, env_steps_sampled"),
        ({"perturbation_factors": (1.2,)}, "perturbation_factors must be two numbers > 0"),
        ({"perturbation_factors": (1.2, 0)}, "perturbation_factors must be two numbers > 0"),
        ({"perturbation_factors": (1.2, -0.8)}, "perturbation_factors must be two numbers > 0"),
        ({"perturbation_factors": (1.2, "a")}, "perturbation_factors must be two numbers > 0"),
        ({"perturbation_factors": 1.2}, "perturbation_factors must be two numbers > 0"),
        ({"max_checkpoint_lag": -1}, "max_checkpoint_lag must be a number >= 0 or None"),
        ({"metric": 3}, "metric must be a result field name"),
        ({"seed": "1"}, "seed must be an integer or None"),
        ({"custom_explore_fn": "no_colon"}, "custom_explore_fn must be an import path"),
        ({"custom_explore_fn": "nosuch_pkg_xyz.mod:fn"},
         "custom_explore_fn 'nosuch_pkg_xyz.mod:fn' does not import"),
        ({"custom_explore_fn": f"{HERE}:nosuch"}, "does not import"),
        ({"custom_explore_fn": f"{HERE}:NOT_CALLABLE"}, "is not callable"),
    ],
)
def test_bad_pbt(kw, message):
    with pytest.raises(ConfigError) as e:
        pbt(**kw).validate(KEYS)
    assert message in str(e.value)


def test_custom_fn_alone_is_enough():
    pbt(hyperparam_mutations={}, custom_explore_fn=f"{HERE}:double_batch").validate(KEYS)
    pbt(perturbation_factors=[2.0, 0.5]).validate(KEYS)  # a TOML array
    pbt(mode=None).validate(KEYS)  # the Tuner fills it from TuneConfig


# --------------------------------------------------------------------------- members


def test_member_round_trip():
    m = Member("t1", score=1.5, time=12, last_perturbation_time=10, alive=False,
               config={"lr": 0.1, "h": [1, 2]})
    d = json.loads(json.dumps(m.to_dict()))
    assert Member.from_dict(d) == m
    nan = Member("t2", score=math.nan)
    assert not nan.scored and nan.to_dict()["score"] is None
    with pytest.raises(ConfigError, match="Member has no field 'scor'; did you mean 'score'"):
        Member.from_dict({"trial_id": "x", "scor": 1})


def test_ready():
    p = pbt(perturbation_interval=10, burn_in_period=25)
    assert not ready(Member("a", time=9), p)
    assert not ready(Member("a", time=20), p)  # an interval past, but in burn-in
    assert ready(Member("a", time=25), p)
    assert not ready(Member("a", time=30, last_perturbation_time=25), p)
    assert ready(Member("a", time=35, last_perturbation_time=25), p)
    assert ready(Member("a", time=10), pbt(perturbation_interval=10))


# --------------------------------------------------------------------------- quantiles


def _pop(scores: list[float | None], **kw) -> list[Member]:
    return [Member(f"t{i}", score=s, **kw) for i, s in enumerate(scores)]


@pytest.mark.parametrize(
    ("fraction", "sizes"),
    [(0.25, [0, 1, 1, 1, 2, 2, 2, 2]), (0.5, [0, 1, 1, 2, 2, 3, 3, 4]), (0.1, [0, 1, 1, 1, 1, 1, 1, 1])],
)
def test_quantile_sizes(fraction, sizes):
    for n, size in zip(range(1, 9), sizes, strict=True):
        members = _pop([float(i) for i in range(n)])
        bottom, top = quantiles(members, pbt(quantile_fraction=fraction))
        assert len(bottom) == len(top) == size, n
        assert not set(bottom) & set(top)
        if size:
            assert bottom[0] == "t0" and top[0] == f"t{n - 1}"  # worst first, best first


def test_quantile_size_has_no_float_noise():
    members = _pop([float(i) for i in range(20)])  # 20 * 0.15 = 3.0000000000000004
    assert len(quantiles(members, pbt(quantile_fraction=0.15))[0]) == 3


def test_quantiles_order_and_mode():
    members = _pop([3.0, 1.0, 4.0, 1.5, 5.0, 9.0, 2.0, 6.0])
    assert quantiles(members, pbt()) == (["t1", "t3"], ["t5", "t7"])
    assert quantiles(members, pbt(mode="min")) == (["t5", "t7"], ["t1", "t3"])
    as_map = {m.trial_id: m for m in members}
    assert quantiles(as_map, pbt()) == quantiles(members, pbt())


def test_quantile_ties_by_trial_id():
    members = _pop([1.0, 1.0, 1.0, 1.0])
    assert quantiles(members, pbt()) == (["t0"], ["t3"])
    assert quantiles(list(reversed(members)), pbt()) == (["t0"], ["t3"])
    assert quantiles(members, pbt(mode="min")) == (["t0"], ["t3"])


def test_quantiles_skip_dead_and_unscored():
    members = _pop([None, math.nan, 5.0, 1.0, 3.0])
    members.append(Member("dead", score=100.0, alive=False))
    members.append(Member("dead2", score=-100.0, alive=False))
    assert quantiles(members, pbt()) == (["t3"], ["t2"])
    assert quantiles(_pop([None, 1.0]), pbt()) == ([], [])
    assert quantiles([], pbt()) == ([], [])


def test_a_paused_member_is_ranked_and_donates_but_is_never_a_target_nor_blocks_the_barrier():
    members = _pop([1.0, 3.0])
    members.append(Member("paused", score=9.0, alive=False, paused=True))
    members.append(Member("paused_low", score=0.0, alive=False, paused=True))
    half = pbt(quantile_fraction=0.5)
    assert quantiles(members, half) == (["paused_low", "t0"], ["paused", "t1"])
    assert donor_candidates("paused_low", members, half, random.Random(0)) == []  # never a target
    assert set(donor_candidates("t0", members, half, random.Random(0))) == {"paused", "t1"}
    due = pbt(perturbation_interval=1)
    for m in members[:2]:
        m.time = 5.0
    assert synch_ready(members, due)  # the paused ones (time 0) do not hold the barrier


def test_quantiles_need_a_mode():
    with pytest.raises(ConfigError, match="PBT needs mode 'max' or 'min'"):
        quantiles(_pop([1.0, 2.0]), pbt(mode=None))


# --------------------------------------------------------------------------- explore


def _explore_many(config: dict, p: PopulationBasedTraining, n: int = 300) -> list[dict]:
    return [explore(config, p, random.Random(seed)) for seed in range(n)]


def _values(config: dict, p: PopulationBasedTraining, key: str = "lr") -> set:
    return {c[key] for c in _explore_many(config, p)}


def test_list_moves_to_a_neighbour():
    values = [1, 2, 3, 4, 5]
    p = pbt(hyperparam_mutations={"lr": values}, resample_probability=0.0)
    assert _values({"lr": 3}, p) == {2, 4}
    assert _values({"lr": 1}, p) == {1, 2}  # clamped at the low end
    assert _values({"lr": 5}, p) == {4, 5}  # and at the high end


def test_choice_domain_moves_like_a_list():
    p = pbt(hyperparam_mutations={"optimizer": choice(["a", "b", "c"])}, resample_probability=0.0)
    assert _values({"optimizer": "a"}, p, "optimizer") == {"a", "b"}
    assert _values({"optimizer": "b"}, p, "optimizer") == {"a", "c"}


def test_numeric_domain_is_multiplied_by_a_factor():
    p = pbt(hyperparam_mutations={"lr": uniform(0, 100)}, resample_probability=0.0)
    assert _values({"lr": 10.0}, p) == {10.0 * 1.2, 10.0 * 0.8}
    p = pbt(hyperparam_mutations={"lr": uniform(0, 100)}, resample_probability=0.0,
            perturbation_factors=(2.0, 0.5))
    assert _values({"lr": 10.0}, p) == {20.0, 5.0}


def test_integers_are_rounded():
    p = pbt(hyperparam_mutations={"num_sgd_iter": randint(1, 100)}, resample_probability=0.0)
    out = _values({"num_sgd_iter": 7}, p, "num_sgd_iter")
    assert out == {8, 6}  # 8.4 and 5.6
    assert all(type(x) is int for x in out)


def test_values_are_clipped_to_the_domain():
    p = pbt(hyperparam_mutations={"lr": uniform(0, 10)}, resample_probability=0.0)
    assert _values({"lr": 9}, p) == {10.0, 9 * 0.8}
    p = pbt(hyperparam_mutations={"lr": loguniform(1e-3, 1)}, resample_probability=0.0)
    assert _values({"lr": 1e-3}, p) == {1e-3, 1e-3 * 1.2}
    p = pbt(hyperparam_mutations={"num_sgd_iter": randint(1, 10)}, resample_probability=0.0)
    assert _values({"num_sgd_iter": 9}, p, "num_sgd_iter") == {9, 7}  # 10.8 -> 9 (exclusive)


def test_quantized_domains_are_requantized():
    p = pbt(hyperparam_mutations={"lr": quniform(0, 10, 0.5)}, resample_probability=0.0)
    assert _values({"lr": 3.0}, p) == {3.5, 2.5}  # 3.6, 2.4
    p = pbt(hyperparam_mutations={"train_batch_size": qrandint(0, 100, 5)},
            resample_probability=0.0)
    assert _values({"train_batch_size": 20}, p, "train_batch_size") == {25, 15}  # 24, 16


def test_resample_probability_one():
    values = list(range(10))
    p = pbt(hyperparam_mutations={"lr": values}, resample_probability=1.0)
    assert _values({"lr": 0}, p) == set(values)  # anywhere, not just a neighbour
    p = pbt(hyperparam_mutations={"lr": uniform(0, 100)}, resample_probability=1.0)
    out = _values({"lr": 10.0}, p)
    assert len(out) == 300 and not out & {12.0, 8.0}
    assert all(0 <= x <= 100 for x in out)


def test_resample_when_value_is_not_in_the_list_or_not_numeric():
    p = pbt(hyperparam_mutations={"lr": [1, 2, 3, 4, 5]}, resample_probability=0.0)
    assert _values({"lr": 99}, p) == {1, 2, 3, 4, 5}
    assert _values({}, p) == {1, 2, 3, 4, 5}  # missing key: resampled, and added
    p = pbt(hyperparam_mutations={"lr": uniform(0, 1)}, resample_probability=0.0)
    for bad in ("x", None, True, math.nan):
        out = _values({"lr": bad}, p)
        assert len(out) == 300 and all(0 <= x <= 1 for x in out)


def test_explore_keeps_other_keys_and_copies():
    config = {"lr": 0.1, "gamma": 0.99, "hidden": [64, 64]}
    p = pbt(hyperparam_mutations={"lr": [0.1, 0.01]})
    new = explore(config, p, random.Random(0))
    assert new is not config and new["hidden"] is not config["hidden"]
    assert new["gamma"] == 0.99 and new["hidden"] == [64, 64]
    assert config == {"lr": 0.1, "gamma": 0.99, "hidden": [64, 64]}


def test_explore_is_deterministic():
    p = pbt(hyperparam_mutations={"lr": loguniform(1e-4, 1), "train_batch_size": [1, 2, 3]})
    config = {"lr": 0.01, "train_batch_size": 2}
    assert _explore_many(config, p, 50) == _explore_many(config, p, 50)


def test_custom_explore_fn_by_import_path():
    p = pbt(hyperparam_mutations={"lr": [0.1, 0.01]}, resample_probability=0.0,
            custom_explore_fn=f"{HERE}:double_batch")
    new = explore({"lr": 0.1, "train_batch_size": 64}, p, random.Random(0))
    assert new == {"lr": 0.01, "train_batch_size": 128}  # after the mutations
    p = pbt(hyperparam_mutations={}, custom_explore_fn=f"{HERE}:double_batch")
    assert explore({"train_batch_size": 3}, p, random.Random(0)) == {"train_batch_size": 6}
    p = pbt(custom_explore_fn=f"{HERE}:not_a_dict")
    with pytest.raises(ConfigError, match="returned list, not a config dict"):
        explore({"lr": 0.1}, p, random.Random(0))


# --------------------------------------------------------------------------- donors, checkpoints


def test_donor_candidates():
    members = _pop([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])  # bottom t0 t1, top t7 t6
    p = pbt()
    orders = {tuple(donor_candidates("t0", members, p, random.Random(s))) for s in range(20)}
    assert orders == {("t7", "t6"), ("t6", "t7")}  # a random order, from the rng
    a = donor_candidates("t1", members, p, random.Random(3))
    assert a == donor_candidates("t1", members, p, random.Random(3))
    for not_bottom in ("t2", "t4", "t7", "nosuch"):
        assert donor_candidates(not_bottom, members, p, random.Random(0)) == []


def _ckpt(time: float, **kw) -> dict:
    return {"path": f"/ckpt/{time}", "time": time, "iteration": int(time), **kw}


def test_checkpoint_usable():
    p = pbt(perturbation_interval=10)
    donor = Member("d", score=1.0, time=30)
    assert checkpoint_usable(None, donor, p) == "missing"
    assert checkpoint_usable(_ckpt(30, error="bad crc"), donor, p) == "unreadable"
    assert checkpoint_usable({"path": "/x"}, donor, p) == "unreadable"
    assert checkpoint_usable(_ckpt(30), donor, p) is None
    assert checkpoint_usable(_ckpt(20), donor, p) is None  # exactly the limit behind
    assert checkpoint_usable(_ckpt(19), donor, p) == (
        "over-age: checkpoint at T=19 is 11 behind the donor's result at T=30 "
        "(max_checkpoint_lag 10)"
    )
    p = pbt(perturbation_interval=10, max_checkpoint_lag=2.5)
    assert checkpoint_usable(_ckpt(27.5), donor, p) is None
    assert checkpoint_usable(_ckpt(27), donor, p) == (
        "over-age: checkpoint at T=27 is 3 behind the donor's result at T=30 "
        "(max_checkpoint_lag 2.5)"
    )
    assert checkpoint_usable(_ckpt(30), donor, pbt(max_checkpoint_lag=0)) is None


def test_synch_ready():
    p = pbt(perturbation_interval=10)
    members = [Member("a", time=10), Member("b", time=12), Member("c", time=3)]
    assert not synch_ready(members, p)  # c is not there yet
    members[2].time = 10
    assert synch_ready(members, p)
    members.append(Member("dead", time=1, alive=False))
    assert synch_ready(members, p)  # a dead member never blocks
    assert synch_ready({m.trial_id: m for m in members}, p)
    assert not synch_ready([Member("dead", time=100, alive=False)], p)
    assert not synch_ready([], p)


# --------------------------------------------------------------------------- state, decide, bookkeeping


def test_state_round_trip_restores_the_rng():
    p = pbt(seed=5)
    state = PBTState.for_scheduler(p)
    for i, s in enumerate([1.0, 2.0, 3.0, 4.0]):
        state.report(f"t{i}", s, 10, {"lr": 0.1})
    state.members["t3"].alive = False
    state.rng.random()
    decide("t0", state, p)
    d = json.loads(json.dumps(state.to_dict()))
    back = PBTState.from_dict(d)
    assert back.members == state.members
    assert back.last_decision == state.last_decision
    assert (back.num_perturbations, back.num_exploits, back.num_donor_skips, back.num_no_donor) == (
        state.num_perturbations, state.num_exploits, state.num_donor_skips, state.num_no_donor)
    assert [back.rng.random() for _ in range(10)] == [state.rng.random() for _ in range(10)]
    assert back.rng.gauss(0, 1) == state.rng.gauss(0, 1)
    assert back.to_dict() == state.to_dict()
    with pytest.raises(ConfigError, match="bad PBT rng state"):
        PBTState.from_dict({**d, "rng": {"version": 3}})


def test_seeded_states_draw_alike():
    a, b = PBTState.for_scheduler(pbt(seed=1)), PBTState.for_scheduler(pbt(seed=1))
    assert a.rng.random() == b.rng.random()


def test_decide():
    p = pbt(perturbation_interval=10)
    state = PBTState(rng=random.Random(0))
    for i, s in enumerate([1.0, 2.0, 3.0, 4.0]):
        state.report(f"t{i}", s, 5, {"lr": 0.1})
    assert decide("t0", state, p) == []  # not due
    assert state.num_perturbations == 0 and state.last_decision == {}
    for m in state.members.values():
        m.time = 10
    assert decide("t3", state, p) == []  # due, but on top: only the clock moves
    assert state.members["t3"].last_perturbation_time == 10 and state.num_perturbations == 1
    assert decide("t0", state, p) == ["t3"]
    assert state.last_decision["t0"] == {"time": 10, "candidates": ["t3"], "skipped": {},
                                         "donor": None}
    assert decide("t0", state, p) == []  # not due again until T=20
    assert state.num_perturbations == 2 and state.members["t0"].num_perturbations == 1
    state.members["t1"].alive = False
    assert decide("t1", state, p) == []
    with pytest.raises(ConfigError, match="PBT has no trial 'zz'"):
        decide("zz", state, p)


def test_report():
    state = PBTState()
    m = state.report("a", 1.0, 3, {"lr": 0.1})
    assert state.members == {"a": Member("a", score=1.0, time=3, config={"lr": 0.1})}
    m.alive = False
    state.report("a", 2.0, 4)
    assert state.members["a"] == Member("a", score=2.0, time=4, config={"lr": 0.1})


def test_record_skip_and_exploit():
    state = PBTState()
    for i, s in enumerate([1.0, 2.0]):
        state.report(f"t{i}", s, 10, {"lr": 0.1})
    record_skip(state, "t0", "t1", "missing")  # no decision yet: one is started
    assert state.last_decision["t0"] == {"skipped": {"t1": "missing"}}
    config = {"lr": 0.2}
    record_exploit(state, "t0", "t1", config)
    config["lr"] = 9.0  # the member keeps its own copy
    assert state.members["t0"].config == {"lr": 0.2} and state.members["t0"].num_exploits == 1
    assert state.last_decision["t0"]["donor"] == "t1"
    assert (state.num_donor_skips, state.num_exploits) == (1, 1)
