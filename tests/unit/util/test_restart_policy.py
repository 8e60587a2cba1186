"""RestartPolicy: the one restart rule of coordinator and worker (budget, crash streaks,
backoff), and how it travels in RegisterNodeReply."""

from __future__ import annotations

import math

import pytest

from ftrl.util.restart_policy import RestartPolicy
from ftrl.wire import ftrl_pb2 as pb


def test_budget():
    assert RestartPolicy.has_budget(0, -1) and RestartPolicy.has_budget(10**6, -1)  # unlimited
    assert not RestartPolicy.has_budget(0, 0)  # never
    assert RestartPolicy.has_budget(2, 3)
    assert not RestartPolicy.has_budget(3, 3)
    assert not RestartPolicy.has_budget(4, 3)


def test_streaks():
    p = RestartPolicy(quick_crash_s=1.0)
    assert p.next_streak(0, None) == 1  # never served: quick
    assert p.next_streak(1, None) == 2
    assert p.next_streak(2, 0.5) == 3  # served briefly: still the same streak
    assert p.next_streak(3, 1.0) == 1  # served long enough: a new streak
    assert p.next_streak(7, 3600.0) == 1
    assert RestartPolicy(quick_crash_s=0.0).next_streak(4, 0.0) == 1  # no quick window
    assert RestartPolicy(quick_crash_s=0.0).next_streak(4, None) == 5


def test_delays():
    p = RestartPolicy(backoff_base_s=0.5, backoff_cap_s=3.0)
    assert [p.delay(n) for n in range(1, 7)] == [0.0, 0.5, 1.0, 2.0, 3.0, 3.0]
    assert p.delay(0) == 0.0
    assert RestartPolicy(0.0, 0.0).delay(5) == 0.0


def test_a_streak_end_to_end():
    """Crash loop: at once, then growing waits; a long run resets to 'at once'."""
    p = RestartPolicy(backoff_base_s=0.1, backoff_cap_s=0.4, quick_crash_s=2.0)
    streak, delays = 0, []
    for alive in (None, 0.1, 0.1, 0.1, 0.1, 60.0, 0.1):
        streak = p.next_streak(streak, alive)
        delays.append(p.delay(streak))
    assert delays == [0.0, 0.1, 0.2, 0.4, 0.4, 0.0, 0.1]


def test_from_an_empty_reply_is_the_default():
    assert RestartPolicy.from_reply(pb.RegisterNodeReply()) == RestartPolicy()
    fallback = RestartPolicy(1.0, 5.0, 3.0)
    assert RestartPolicy.from_reply(pb.RegisterNodeReply(node_epoch=3), fallback) is fallback
    assert RestartPolicy.from_reply(object()) == RestartPolicy()  # no such fields at all


def test_from_a_filled_reply():
    reply = pb.RegisterNodeReply(node_epoch=1, restart_backoff_base_s=0.25,
                                 restart_backoff_cap_s=8.0, quick_crash_s=4.0)
    assert RestartPolicy.from_reply(reply) == RestartPolicy(0.25, 8.0, 4.0)
    # a reply survives the wire
    again = pb.RegisterNodeReply.FromString(reply.SerializeToString())
    assert RestartPolicy.from_reply(again) == RestartPolicy(0.25, 8.0, 4.0)
    # base 0 and quick_crash 0 are meaningful (no backoff, no quick window)
    zero = pb.RegisterNodeReply(restart_backoff_base_s=0.0, restart_backoff_cap_s=1.0)
    assert RestartPolicy.from_reply(zero) == RestartPolicy(0.0, 1.0, 0.0)


@pytest.mark.parametrize("base, cap, quick", [
    (2.0, 1.0, 1.0),  # base above cap
    (-0.1, 1.0, 1.0),
    (0.1, 4000.0, 1.0),  # absurd cap
    (0.1, 1.0, -1.0),
    (0.1, 1.0, 7200.0),
    (math.nan, 1.0, 1.0),
    (0.1, math.inf, 1.0),
    (0.1, 1.0, math.nan),
])
def test_validate_refuses_nonsense(base, cap, quick):
    with pytest.raises(ValueError, match="restart_backoff_base_s"):
        RestartPolicy(base, cap, quick).validate()
    reply = pb.RegisterNodeReply(restart_backoff_base_s=base, restart_backoff_cap_s=cap,
                                 quick_crash_s=quick)
    with pytest.raises(ValueError):  # a worker keeps its policy then (and logs it)
        RestartPolicy.from_reply(reply)


def test_validate_accepts_sensible_settings():
    for policy in (RestartPolicy(), RestartPolicy(0.0, 0.0, 0.0), RestartPolicy(1.0, 3600.0, 3600.0)):
        policy.validate()
