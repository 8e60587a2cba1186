"""Weights to env runners: the broadcast tree (construction, relaying over in-process
actors, a failed relay's subtree still synced) and the `max_weights_lag` rule."""

from __future__ import annotations

import pytest

import ftrl.rl.weights.tree as weights_tree
from ftrl.rl.sampling.runner_slot import weights_fresh
from ftrl.rl.weights.tree import build_weights_tree, subtree_height, subtree_names
from tests.local_client import LocalClient
from tests.unit.rl.sampling.test_runner_group import _config, _group, _until, _weights

# ---------------------------------------------------------------- tree construction


def _walk(forest: list, depth: int = 1):
    for name, inc, children in forest:
        yield name, inc, children, depth
        yield from _walk(children, depth + 1)


@pytest.mark.parametrize("n,k", [(1, 4), (4, 4), (5, 4), (8, 4), (17, 4), (7, 2), (10, 3), (6, 1), (100, 4)])
def test_tree_covers_every_target_once_with_at_most_fanout_children(n, k):
    targets = [(f"r{i}", i + 10) for i in range(n)]
    forest = build_weights_tree(targets, k)
    nodes = list(_walk(forest))
    assert sorted(name for name, *_ in nodes) == sorted(name for name, _ in targets)
    assert len(forest) == min(n, k)
    assert all(len(children) <= k for _, _, children, _ in nodes)
    assert all(inc == int(name[1:]) + 10 for name, inc, _, _ in nodes)  # incarnations travel
    # breadth first: depth grows like log_k(n) (k=1 is a chain)
    depth = max(d for *_, d in nodes)
    level, covered, expected = k, 0, 0
    while covered < n:
        covered += level
        level *= k
        expected += 1
    assert depth == (n if k == 1 else expected)


def test_tree_heap_order():
    forest = build_weights_tree([(f"r{i}", 1) for i in range(7)], 2)
    assert [f[0] for f in forest] == ["r0", "r1"]
    assert [c[0] for c in forest[0][2]] == ["r2", "r3"]
    assert [c[0] for c in forest[1][2]] == ["r4", "r5"]
    assert [c[0] for c in forest[0][2][0][2]] == ["r6"]
    assert subtree_names(forest[0]) == ["r0", "r2", "r6", "r3"]
    assert subtree_height(forest[0]) == 3 and subtree_height(forest[1]) == 2


# ---------------------------------------------------------------- the lag rule


def test_weights_fresh_rule():
    assert weights_fresh(5, 5, 0) and not weights_fresh(4, 5, 0) and not weights_fresh(6, 5, 0)
    assert weights_fresh(3, 5, 2) and weights_fresh(5, 5, 2)
    assert not weights_fresh(2, 5, 2) and not weights_fresh(6, 5, 2)


@pytest.mark.parametrize("lag,dropped", [(0, 1), (1, 0)])
def test_late_fragment_within_the_lag_is_used(lag, dropped):
    cfg = _config(sample_timeout_s=0.3)
    cfg.env_runners(max_weights_lag=lag)
    with LocalClient() as client:
        group = _group(client, cfg)
        group.sync_weights(0, _weights())
        client.delay_calls("t/env_runner/1", 1.0)
        group.sample(32)  # runner 1 is late with a v0 fragment
        client.delay_calls("t/env_runner/1", 0.0)
        group.sync_weights(1, _weights())
        _until(lambda: group.slots[1].inflight is not None and group.slots[1].inflight.done())
        round_ = group.sample(16)
        late = [r for r in round_.results if r["late"]]
        assert len(late) == 1 and late[0]["weights_version"] == 0
        assert late[0]["dropped"] is bool(dropped)
        assert group.num_samples_dropped == dropped
        group.stop()


def test_runner_older_than_the_lag_never_samples():
    cfg = _config()
    cfg.env_runners(max_weights_lag=1)
    with LocalClient() as client:
        group = _group(client, cfg)
        group.sync_weights(0, _weights())
        # the learner moved on by 1: v0 runners may still sample; by 2: they may not
        assert group.sample(16, current_version=1).env_steps >= 16
        round_ = group.sample(16, current_version=2)
        # a fragment started at v0 while that was allowed may still come back: dropped
        assert round_.env_steps == 0 and all(r["dropped"] for r in round_.results)
        assert all(s.inflight is None for s in group.slots)  # no runner started a new sample
        group.stop()


# ---------------------------------------------------------------- relaying


def test_in_process_runners_fall_back_to_direct_sends():
    cfg = _config(n=6)
    cfg.env_runners(weights_fanout=2)
    with LocalClient() as client:
        group = _group(client, cfg)
        group.sync_weights(0, _weights())  # runners have no runtime client: cannot relay
        assert all(s.synced_version == 0 for s in group.slots)
        assert group.last_sync["tree"] and group.last_sync["direct_retries"] == 4
        assert {h.call("ping")["weights_version"] for h in (s.handle for s in group.slots)} == {0}
        group.sync_weights(1, _weights())
        assert not group.last_sync["tree"]  # learned: direct from now on
        assert all(s.synced_version == 1 for s in group.slots)
        group.stop()


@pytest.fixture
def relaying(monkeypatch):
    """In-process runners that relay through the LocalClient (as actors do through
    their runtime client)."""
    client = LocalClient()
    monkeypatch.setattr(weights_tree, "_peer_client", lambda: client)
    with client:
        yield client


def test_weights_go_down_the_tree(relaying):
    cfg = _config(n=7)
    cfg.env_runners(weights_fanout=2)
    group = _group(relaying, cfg)
    group.sync_weights(4, _weights())
    assert group.last_sync == {"version": 4, "targets": 7, "tree": True, "via_tree": 7, "direct_retries": 0, "plane": False}
    assert all(s.synced_version == 4 for s in group.slots)
    assert {s.handle.call("ping")["weights_version"] for s in group.slots} == {4}
    assert group.sample(7 * 16).env_steps == 7 * 16
    group.stop()


@pytest.mark.parametrize("victim", [0, 2])  # a root of the tree; an interior runner under root 0
def test_a_failed_relay_does_not_cost_its_subtree_the_weights(relaying, victim):
    cfg = _config(n=7)
    cfg.env_runners(weights_fanout=2)
    group = _group(relaying, cfg)
    group.sync_weights(0, _weights())
    relaying.crash_actor(f"t/env_runner/{victim}")  # restarted in place: a new incarnation
    group.sync_weights(1, _weights())
    others = [s for s in group.slots if s.index != victim + 1]
    assert all(s.synced_version == 1 for s in others)
    assert {s.handle.call("ping")["weights_version"] for s in others} == {1}
    assert group.last_sync["direct_retries"] >= 1  # the victim's subtree, from the driver
    assert group.slots[victim].state == "recovering"  # fenced: never fed by a relay
    _until(lambda: (group.poll_recoveries(), group.num_healthy == 7)[1])
    assert group.slots[victim].synced_version == 1
    assert group.slots[victim].handle.call("ping")["weights_version"] == 1
    group.stop()
