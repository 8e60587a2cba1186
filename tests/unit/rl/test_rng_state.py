"""RNG states through msgpack and back (checkpoints): one conversion for all."""

from __future__ import annotations

import random

import numpy as np
import torch

from ftrl.rl import rng_state
from ftrl.wire import codec


def _through_the_wire(obj):
    return codec.decode(codec.encode(obj))


def test_global_states_restore_the_same_draws():
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    saved = _through_the_wire(rng_state.global_rng_to_wire())
    first = (random.random(), np.random.rand(), np.random.randn(), torch.rand(2).tolist())
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    rng_state.global_rng_from_wire(saved)
    assert (random.random(), np.random.rand(), np.random.randn(), torch.rand(2).tolist()) == first


def test_missing_parts_are_left_alone():
    random.seed(5)
    expected = random.random()
    random.seed(5)
    rng_state.global_rng_from_wire({})
    assert random.random() == expected


def test_generator_state_with_128_bit_ints():
    rng = np.random.default_rng(123)
    rng.random(7)
    wire = rng_state.bitgen_state_to_wire(rng.bit_generator.state)
    assert wire["state"]["state"] == {"__bigint__": str(rng.bit_generator.state["state"]["state"])}
    expected = rng.random(5)
    other = np.random.default_rng(0)
    other.bit_generator.state = rng_state.bitgen_state_from_wire(_through_the_wire(wire))
    np.testing.assert_array_equal(other.random(5), expected)

