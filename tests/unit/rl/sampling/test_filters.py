"""MeanStdFilter: running stats merge exactly; deltas and states round-trip."""

from __future__ import annotations

import numpy as np
import pytest

from ftrl.rl.sampling.filters import MeanStdFilter, NoFilter, RunningStat, make_filter
from ftrl.wire import codec


def test_running_stat_merge_equals_stats_of_all_data():
    rng = np.random.default_rng(0)
    a, b = rng.normal(3, 2, (100, 3)), rng.normal(-1, 0.5, (37, 3))
    s1, s2 = RunningStat((3,)), RunningStat((3,))
    s1.push_batch(a[:50])
    s1.push_batch(a[50:])
    s2.push_batch(b)
    s1.merge(s2)
    both = np.concatenate([a, b])
    assert s1.n == 137
    np.testing.assert_allclose(s1.mean, both.mean(0), rtol=1e-10)
    np.testing.assert_allclose(s1.std, both.std(0, ddof=1), rtol=1e-10)


def test_runner_deltas_merge_into_central_filter():
    rng = np.random.default_rng(1)
    central = MeanStdFilter((2,))
    runners = [MeanStdFilter((2,)) for _ in range(2)]
    data = [rng.normal(5, 3, (64, 2)) for _ in range(2)]
    for f, x in zip(runners, data, strict=True):
        f(x)
    for f in runners:
        central.apply_delta(codec.decode(codec.encode(f.get_delta())))  # over the wire
    assert central.stats.n == 128
    np.testing.assert_allclose(central.stats.mean, np.concatenate(data).mean(0), rtol=1e-10)
    # deltas were flushed
    assert runners[0].get_delta()["stats"]["n"] == 0
    # pushing the central state back makes runners normalize identically
    state = codec.decode(codec.encode(central.get_state()))
    for f in runners:
        f.set_state(state)
    x = rng.normal(5, 3, (4, 2))
    np.testing.assert_allclose(runners[0](x, update=False), central(x, update=False))
    out = central(x, update=False)
    assert np.all(np.abs(out) <= 10.0)


def test_filter_normalizes_and_clips():
    f = MeanStdFilter((1,), clip=2.0)
    f(np.array([[0.0], [2.0], [4.0]]))
    y = f(np.array([[2.0], [100.0]]), update=False)
    assert y[0, 0] == pytest.approx(0.0, abs=1e-6)
    assert y[1, 0] == 2.0


def test_kind_and_shape_mismatch_raise():
    with pytest.raises(ValueError, match="NoFilter"):
        MeanStdFilter((2,)).set_state(NoFilter().get_state())
    with pytest.raises(ValueError, match="shape"):
        MeanStdFilter((3,)).set_state(MeanStdFilter((2,)).get_state())
    assert isinstance(make_filter("NoFilter", (2,)), NoFilter)
    with pytest.raises(ValueError):
        make_filter("Other", (2,))
