"""ftrl.tune.search: domains, grid axes, TOML and wire forms, variant generation."""

from __future__ import annotations

import json
import random

import pytest

from ftrl.tune.search import (
    MAX_VARIANTS,
    Choice,
    Domain,
    LogRandInt,
    LogUniform,
    QLogUniform,
    QRandInt,
    QUniform,
    RandInt,
    Uniform,
    check_param_space,
    choice,
    domain_from_dict,
    domain_from_spec,
    generate_variants,
    grid_search,
    lograndint,
    loguniform,
    param_space_from_wire,
    param_space_to_wire,
    qloguniform,
    qrandint,
    quniform,
    randint,
    uniform,
)
from ftrl.wire.errors import ConfigError

ALL_DOMAINS = [
    choice(["a", "b", "c"]),
    uniform(-1.0, 2.0),
    loguniform(1e-4, 1e-2),
    quniform(0.0, 1.0, 0.1),
    qloguniform(1e-3, 1.0, 1e-3),
    randint(0, 5),
    qrandint(0, 20, 5),
    lograndint(1, 1000, base=2),
]


def _draws(domain: Domain, n: int = 2000) -> list:
    rng = random.Random(0)
    return [domain.sample(rng) for _ in range(n)]


# --------------------------------------------------------------------------- grid_search


def test_grid_search():
    assert grid_search([1, 2]) == {"grid_search": [1, 2]}
    assert grid_search((1,)) == {"grid_search": [1]}
    for bad in ([], (), "ab", None, 3):
        with pytest.raises(ConfigError, match="grid_search needs a non-empty list"):
            grid_search(bad)


# --------------------------------------------------------------------------- domains


@pytest.mark.parametrize("domain", ALL_DOMAINS, ids=lambda d: d.type_name)
def test_samples_stay_in_bounds(domain: Domain):
    draws = _draws(domain)
    if isinstance(domain, Choice):
        assert set(draws) == set(domain.categories)
        return
    lo, hi = domain.bounds
    assert all(lo <= x <= hi for x in draws)
    assert len(set(draws)) > 3
    if domain.is_integer:
        assert all(type(x) is int for x in draws)
    else:
        assert all(type(x) is float for x in draws)


def test_int_bounds_follow_tune():
    assert set(_draws(randint(0, 3))) == {0, 1, 2}  # high exclusive
    assert set(_draws(qrandint(0, 9, 3))) == {0, 3, 6, 9}  # high inclusive
    assert max(_draws(lograndint(1, 8, base=2))) == 7  # high exclusive
    assert randint(0, 3).bounds == (0, 2) and qrandint(0, 9, 3).bounds == (0, 9)


def test_quantized_values_are_multiples_of_q():
    assert all(round(x * 10) / 10 == x for x in _draws(quniform(0.0, 1.0, 0.1)))
    assert set(_draws(quniform(0.0, 1.0, 0.25))) == {0.0, 0.25, 0.5, 0.75, 1.0}
    assert all(x % 5 == 0 for x in _draws(qrandint(1, 19, 5)))  # only 5, 10, 15
    assert set(_draws(qrandint(1, 19, 5))) == {5, 10, 15}
    assert all(abs(x * 1000 - round(x * 1000)) < 1e-6 for x in _draws(qloguniform(1e-3, 1, 1e-3)))


def test_loguniform_is_log_spread():
    draws = _draws(loguniform(1e-4, 1.0))
    below = sum(x < 1e-2 for x in draws) / len(draws)
    assert 0.4 < below < 0.6  # half the decades, half the draws


def test_project_rounds_and_clips():
    assert uniform(0, 10).project(12.5) == 10.0
    assert uniform(0, 10).project(-1) == 0.0
    assert loguniform(1e-3, 1).project(5e-4) == 1e-3
    assert randint(0, 10).project(9.7) == 9  # high exclusive: 9 is the top
    assert randint(0, 10).project(4.4) == 4
    assert qrandint(0, 100, 5).project(23) == 25
    assert qrandint(1, 19, 5).project(0) == 5  # the lowest multiple inside the bounds
    assert quniform(0, 1, 0.1).project(0.33) == 0.3
    assert quniform(0.15, 1, 0.1).project(0.1) == 0.2
    assert lograndint(1, 100).project(1000) == 99
    assert type(randint(0, 10).project(3.0)) is int


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: choice([]), "choice needs at least one category"),
        (lambda: Choice("ab"), "choice needs a list"),
        (lambda: uniform(2, 1), "uniform low 2 > high 1"),
        (lambda: uniform(0, float("inf")), "uniform high must be a finite number"),
        (lambda: uniform("a", 1), "uniform low must be a finite number"),
        (lambda: loguniform(0.1, 0.01), "loguniform low 0.1 > high 0.01"),
        (lambda: loguniform(0, 1), "loguniform bounds must be > 0, got low 0"),
        (lambda: loguniform(-1, 1), "loguniform bounds must be > 0"),
        (lambda: loguniform(1, 2, base=1), "loguniform base must be > 0 and != 1"),
        (lambda: quniform(0, 1, 0), "quniform q must be > 0, got 0"),
        (lambda: quniform(0, 1, -0.5), "quniform q must be > 0"),
        (lambda: quniform(0.1, 0.2, 1), "quniform has no multiple of q 1 in"),
        (lambda: quniform(2, 1, 0.1), "quniform low 2 > high 1"),
        (lambda: qloguniform(0, 1, 0.1), "qloguniform bounds must be > 0"),
        (lambda: qloguniform(1e-3, 1e-2, 0), "qloguniform q must be > 0"),
        (lambda: randint(3, 3), "randint low 3 >= high 3 (high is exclusive)"),
        (lambda: randint(4, 3), "randint low 4 >= high 3"),
        (lambda: randint(0.5, 3), "randint low must be an integer"),
        (lambda: qrandint(4, 3), "qrandint low 4 > high 3"),
        (lambda: qrandint(0, 10, 0), "qrandint q must be an integer > 0"),
        (lambda: qrandint(0, 10, 1.5), "qrandint q must be an integer > 0"),
        (lambda: qrandint(1, 4, 5), "qrandint has no multiple of q 5 in [1, 4]"),
        (lambda: lograndint(2, 2), "lograndint low 2 >= high 2"),
        (lambda: lograndint(0, 10), "lograndint bounds must be > 0, got low 0"),
    ],
)
def test_bad_domains(make, message):
    with pytest.raises(ConfigError) as e:
        make()
    assert message in str(e.value)


def test_int_domains_take_integral_floats():
    assert randint(1.0, 10.0) == RandInt(1, 10)  # TOML may write 1e1
    assert type(randint(1.0, 10.0).low) is int
    assert qrandint(0, 10.0, 2.0) == QRandInt(0, 10, 2)


def test_domain_flags():
    assert not choice([1]).is_numeric
    assert uniform(0, 1).is_numeric and not uniform(0, 1).is_integer
    for d in (randint(0, 2), qrandint(0, 2), lograndint(1, 3)):
        assert d.is_numeric and d.is_integer


@pytest.mark.parametrize("domain", ALL_DOMAINS, ids=lambda d: d.type_name)
def test_domain_dict_round_trip(domain: Domain):
    d = domain.to_dict()
    assert d["type"] == domain.type_name
    assert domain_from_dict(json.loads(json.dumps(d))) == domain


def test_domain_dicts():
    assert loguniform(1e-4, 1e-2).to_dict() == {
        "type": "loguniform", "low": 1e-4, "high": 1e-2, "base": 10}
    assert choice([1, "a"]).to_dict() == {"type": "choice", "categories": [1, "a"]}
    assert qrandint(0, 10, 2).to_dict() == {"type": "qrandint", "low": 0, "high": 10, "q": 2}


@pytest.mark.parametrize(
    ("d", "message"),
    [
        ({"low": 1}, "needs a 'type' field"),
        ("uniform", "needs a 'type' field"),
        ({"type": "gauss", "low": 1}, "unknown domain type 'gauss'; known: choice, uniform"),
        ({"type": "uniform", "low": 0, "high": 1, "q": 1}, "uniform has no argument(s) ['q']"),
        ({"type": "uniform", "low": 0}, "uniform takes [low, high]"),
        ({"type": "loguniform", "low": 1, "high": 0.1}, "loguniform low 1 > high 0.1"),
    ],
)
def test_bad_domain_dicts(d, message):
    with pytest.raises(ConfigError) as e:
        domain_from_dict(d)
    assert message in str(e.value)


# --------------------------------------------------------------------------- TOML forms


def test_toml_forms():
    assert domain_from_spec({"loguniform": [1e-4, 1e-2]}) == LogUniform(1e-4, 1e-2)
    assert domain_from_spec({"loguniform": [1, 8, 2]}) == LogUniform(1, 8, 2)
    assert domain_from_spec({"uniform": [0, 1]}) == Uniform(0, 1)
    assert domain_from_spec({"choice": ["a", "b"]}) == Choice(("a", "b"))
    assert domain_from_spec({"randint": [1, 5]}) == RandInt(1, 5)
    assert domain_from_spec({"quniform": [0, 1, 0.5]}) == QUniform(0, 1, 0.5)
    assert domain_from_spec({"qloguniform": [1e-3, 1, 1e-3]}) == QLogUniform(1e-3, 1, 1e-3)
    assert domain_from_spec({"qrandint": [0, 10]}) == QRandInt(0, 10, 1)
    assert domain_from_spec({"qrandint": [0, 10, 2]}) == QRandInt(0, 10, 2)
    assert domain_from_spec({"lograndint": [1, 100]}) == LogRandInt(1, 100)
    assert domain_from_spec({"__domain__": {"type": "randint", "low": 0, "high": 2}}) == RandInt(0, 2)


def test_specs_that_are_not_domains():
    assert domain_from_spec({"grid_search": [1, 2]}) == {"grid_search": [1, 2]}
    for constant in (3, 0.5, "adam", [64, 64], None, True):
        assert domain_from_spec(constant) == constant
    d = uniform(0, 1)
    assert domain_from_spec(d) is d


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"gaussian": [0, 1]}, "{'gaussian': [0, 1]} is not a search-space form"),
        ({"a": 1, "b": 2}, "param_space keys are flat config keys"),
        ({}, "is not a search-space form"),
        ({"loguniform": 1e-3}, "{'loguniform': ...} takes a list [low, high, base=10]"),
        ({"loguniform": [1e-3]}, "{'loguniform': ...} takes [low, high, base=10], got 1 values"),
        ({"quniform": [0, 1]}, "{'quniform': ...} takes [low, high, q], got 2 values"),
        ({"qrandint": [0, 1, 1, 1]}, "takes [low, high, q=1], got 4 values"),
        ({"loguniform": [1e-2, 1e-4]}, "loguniform low 0.01 > high 0.0001"),
        ({"choice": []}, "choice needs at least one category"),
        ({"grid_search": []}, "grid_search needs a non-empty list"),
        ({"grid_search": 3}, "grid_search needs a non-empty list"),
    ],
)
def test_bad_specs(spec, message):
    with pytest.raises(ConfigError) as e:
        domain_from_spec(spec)
    assert message in str(e.value)


def test_unknown_form_lists_the_known_ones():
    with pytest.raises(ConfigError) as e:
        domain_from_spec({"normal": [0, 1]})
    for form in ("choice", "uniform", "loguniform", "quniform", "qloguniform", "randint",
                 "qrandint", "lograndint", "grid_search"):
        assert f"'{form}'" in str(e.value)


# --------------------------------------------------------------------------- check_param_space

KEYS = ("lr", "entropy_coeff", "num_envs_per_env_runner", "gamma", "hidden_sizes")


def test_check_param_space_accepts_all_forms():
    check_param_space(
        {
            "lr": loguniform(1e-4, 1e-2),
            "entropy_coeff": {"uniform": [0.0, 0.01]},
            "num_envs_per_env_runner": grid_search([1, 2]),
            "gamma": 0.99,
            "hidden_sizes": [64, 64],
        },
        KEYS,
    )
    check_param_space({}, KEYS)


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ({"lrr": 0.1}, "param_space['lrr']: not a config key; did you mean 'lr'?"),
        ({"entropy_coef": 0.1}, "did you mean 'entropy_coeff'?"),
        ({"zzzz": 0.1}, "param_space['zzzz']: not a config key"),
        ({"lr": loguniform(1e-4, 1e-2), "gama": 0.9}, "param_space['gama']"),
        ({"lr": {"loguniform": [0.1, 0.01]}}, "param_space['lr']: loguniform low 0.1 > high 0.01"),
        ({"lr": {"grid_search": []}}, "param_space['lr']: grid_search needs a non-empty list"),
        ({"gamma": {"inner": 1, "x": 2}}, "param_space['gamma']: "),
        ({"gamma": {"inner": 1}}, "param_space keys are flat config keys"),
        ({"lr": {"normal": [0, 1]}}, "param_space['lr']: {'normal': [0, 1]} is not"),
        ({1: 0.1}, "param_space keys are config key names, got 1"),
        ([("lr", 1)], "param_space must be a table"),
    ],
)
def test_check_param_space_errors(space, message):
    with pytest.raises(ConfigError) as e:
        check_param_space(space, KEYS)
    assert message in str(e.value)


def test_check_param_space_message_is_exact():
    with pytest.raises(ConfigError) as e:
        check_param_space({"lr": {"loguniform": [0.1, 0.01]}}, KEYS)
    assert str(e.value) == "param_space['lr']: loguniform low 0.1 > high 0.01"
    with pytest.raises(ConfigError) as e:
        check_param_space({"lrr": 0.1}, KEYS)
    assert str(e.value) == "param_space['lrr']: not a config key; did you mean 'lr'?"


def test_check_param_space_revalidates_domain_objects():
    d = uniform(0, 1)
    object.__setattr__(d, "low", 5)  # tampered with after construction
    with pytest.raises(ConfigError, match=r"param_space\['lr'\]: uniform low 5 > high 1"):
        check_param_space({"lr": d}, KEYS)


# --------------------------------------------------------------------------- wire form


def test_wire_round_trip():
    space = {
        "lr": loguniform(1e-4, 1e-2),
        "entropy_coeff": {"uniform": [0.0, 0.01]},
        "num_envs_per_env_runner": grid_search([1, 2]),
        "gamma": 0.99,
        "hidden_sizes": [64, 64],
        "opt": choice(["adam", "sgd"]),
        "n": qrandint(0, 10, 2),
    }
    wire = param_space_to_wire(space)
    assert wire == {
        "lr": {"__domain__": {"type": "loguniform", "low": 1e-4, "high": 1e-2, "base": 10}},
        "entropy_coeff": {"__domain__": {"type": "uniform", "low": 0.0, "high": 0.01}},
        "num_envs_per_env_runner": {"grid_search": [1, 2]},
        "gamma": 0.99,
        "hidden_sizes": [64, 64],
        "opt": {"__domain__": {"type": "choice", "categories": ["adam", "sgd"]}},
        "n": {"__domain__": {"type": "qrandint", "low": 0, "high": 10, "q": 2}},
    }
    back = param_space_from_wire(json.loads(json.dumps(wire)))
    assert back == {**space, "entropy_coeff": uniform(0.0, 0.01)}  # TOML form normalized
    assert list(back) == list(space)
    assert param_space_to_wire(back) == wire
    assert generate_variants(back, 3, seed=1) == generate_variants(space, 3, seed=1)


def test_wire_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"param_space\['lr'\]: unknown domain type 'x'"):
        param_space_from_wire({"lr": {"__domain__": {"type": "x"}}})
    with pytest.raises(ConfigError, match="param_space must be a table"):
        param_space_from_wire(["lr"])


# --------------------------------------------------------------------------- generate_variants


def test_grid_times_samples():
    space = {
        "a": grid_search([1, 2, 3]),
        "lr": loguniform(1e-4, 1e-2),
        "b": grid_search(["x", "y"]),
        "gamma": 0.99,
    }
    variants = generate_variants(space, num_samples=4, seed=0)
    assert len(variants) == 3 * 2 * 4
    combos = [(v["a"], v["b"]) for v in variants]
    one_pass = [(1, "x"), (1, "y"), (2, "x"), (2, "y"), (3, "x"), (3, "y")]  # first key slowest
    assert combos == one_pass * 4
    assert all(list(v) == ["a", "lr", "b", "gamma"] for v in variants)
    assert all(v["gamma"] == 0.99 for v in variants)
    assert len({v["lr"] for v in variants}) == len(variants)  # sampled for every variant
    assert all(1e-4 <= v["lr"] <= 1e-2 for v in variants)


def test_no_grid_and_no_domain():
    assert generate_variants({"lr": 0.1}, 3, seed=0) == [{"lr": 0.1}] * 3
    assert generate_variants({}, 2, seed=0) == [{}, {}]
    assert len(generate_variants({"lr": uniform(0, 1)}, 5, seed=0)) == 5


def test_variants_are_deterministic():
    space = {"lr": {"loguniform": [1e-5, 1e-1]}, "k": randint(0, 1000), "g": grid_search([1, 2])}
    a = generate_variants(space, 5, seed=42)
    assert a == generate_variants(space, 5, seed=42)
    assert a != generate_variants(space, 5, seed=43)
    # the draws come from random.Random(seed), in variant then key order
    rng = random.Random(42)
    lr, k = loguniform(1e-5, 1e-1), randint(0, 1000)
    expected = []
    for _ in range(5):
        for g in (1, 2):
            expected.append({"lr": lr.sample(rng), "k": k.sample(rng), "g": g})
    assert a == expected


def test_variants_do_not_share_values():
    space = {"hidden": [64, 64], "g": grid_search([[1], [2]])}
    variants = generate_variants(space, 2, seed=0)
    variants[0]["hidden"].append(1)
    variants[0]["g"].append(9)
    assert variants[2] == {"hidden": [64, 64], "g": [1]}
    assert space == {"hidden": [64, 64], "g": {"grid_search": [[1], [2]]}}


@pytest.mark.parametrize("n", [0, -1, 1.5, True, "2", None])
def test_bad_num_samples(n):
    with pytest.raises(ConfigError, match="num_samples must be an integer >= 1"):
        generate_variants({"lr": 0.1}, n, seed=0)


def test_variant_cap():
    space = {"a": grid_search(list(range(100))), "b": grid_search(list(range(100)))}
    assert len(generate_variants(space, 1, seed=0)) == MAX_VARIANTS
    with pytest.raises(ConfigError, match="10000 grid combinations x num_samples 2 = 20000"):
        generate_variants(space, 2, seed=0)
    with pytest.raises(ConfigError, match="more than the limit of 10000"):
        generate_variants({"lr": 0.1}, MAX_VARIANTS + 1, seed=0)


def test_variants_name_the_bad_key():
    with pytest.raises(ConfigError, match=r"param_space\['lr'\]: uniform low 2 > high 1"):
        generate_variants({"lr": {"uniform": [2, 1]}}, 1, seed=0)
