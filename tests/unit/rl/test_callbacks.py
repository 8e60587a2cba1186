"""ftrl.Callbacks by import path, the metrics logger its hooks log to, the hook caller
that keeps a raising hook from stopping anything, and the episode window's custom
metric statistics (checkpointed with it)."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

import ftrl
from ftrl.rl.callbacks import (
    Callbacks,
    HookCaller,
    MetricsLogger,
    build_callbacks,
    check_callbacks,
    custom_metric_stats,
    load_callbacks,
    overridden_hooks,
)
from ftrl.rl.driver.metrics import EpisodeWindow
from ftrl.wire.errors import ConfigError


class EndOnly(Callbacks):
    def on_episode_end(self, **kwargs):
        pass


class NotCallbacks:
    def on_episode_end(self, **kwargs):
        pass


def test_callbacks_are_named_by_import_path_and_checked_before_anything_starts():
    assert ftrl.Callbacks is Callbacks
    assert load_callbacks(None) is None
    assert load_callbacks("ftrl.testing.callbacks:PoleAngle").__name__ == "PoleAngle"
    with pytest.raises(ConfigError, match=r"callbacks_class 'ftrl.testing.callbacks:Nope' does not import"):
        load_callbacks("ftrl.testing.callbacks:Nope")
    with pytest.raises(ConfigError, match=r"callbacks_class 'no_such_module_x:C' does not import"):
        load_callbacks("no_such_module_x:C")
    with pytest.raises(ConfigError, match=r"is a type, not a subclass of ftrl.Callbacks"):
        load_callbacks(f"{__name__}:NotCallbacks")
    # the config refuses a malformed path at once; build() refuses a bad class before any process
    with pytest.raises(ConfigError, match="callbacks_class must be an import path"):
        ftrl.PPOConfig().callbacks("not a path")
    config = ftrl.PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=2).callbacks(
        f"{__name__}:NotCallbacks")
    with pytest.raises(ConfigError, match="callbacks_class"):
        check_callbacks(config)
    with pytest.raises(ConfigError, match="callbacks_class"):
        config.build()  # (2 remote runners: it would have started a cluster)


def test_only_overridden_hooks_are_called():
    assert overridden_hooks(EndOnly) == {"on_episode_end"}
    assert overridden_hooks(Callbacks) == frozenset()
    assert isinstance(build_callbacks(f"{__name__}:EndOnly"), EndOnly)


def test_log_value_reduces_per_name_and_drops_bad_input_once_logged(caplog):
    logger = MetricsLogger()
    for v in (1, 2.5, np.float32(4.5), np.array(0.0)):
        logger.log_value("a", v)
    logger.log_value("lo", 3, reduce="min")
    logger.log_value("lo", -1, reduce="min")
    logger.log_value("hi", 3, reduce="max")
    logger.log_value("total", 2, reduce="sum")
    logger.log_value("total", 5, reduce="sum")
    with caplog.at_level(logging.WARNING, logger="ftrl.rl.callbacks"):
        logger.log_value("bad name", 1)
        logger.log_value("bad name", 2)
        logger.log_value("text", "1.0")
        logger.log_value("flag", True)
        logger.log_value("nan", math.nan)
        logger.log_value("inf", np.inf)
        logger.log_value("a", 1.0, reduce="max")  # "a" is a mean
        logger.log_value("median", 1.0, reduce="median")
        logger.log_value("vec", np.ones(3))
    assert logger.drops.count == 9
    warned = [r.getMessage() for r in caplog.records]
    assert sum("'bad name'" in m for m in warned) == 1  # once per name
    assert any("reduce must be one of" in m for m in warned)
    assert logger.reduce_all() == {"a": 2.0, "lo": -1.0, "hi": 3.0, "total": 7.0}
    assert logger.reduce_all() == {}  # emptied


def test_a_raising_hook_is_logged_once_counted_and_the_caller_goes_on(caplog):
    class Buggy(Callbacks):
        def on_train_result(self, **kwargs):
            raise KeyError("oops")

    caller = HookCaller(Buggy(), "driver")
    assert "on_train_result" in caller and "on_episode_end" not in caller
    with caplog.at_level(logging.ERROR, logger="ftrl.rl.callbacks"):
        assert caller.call("on_train_result", result={}) is False
        assert caller.call("on_train_result", result={}) is False
        assert caller.call("on_episode_end") is True  # not overridden: not called
    assert caller.errors == 2 and caller.counts()["num_callback_errors"] == 2
    errors = [r.getMessage() for r in caplog.records]
    assert len(errors) == 1 and "Buggy.on_train_result raised" in errors[0] and "KeyError: 'oops'" in errors[0]
    assert "Traceback" in errors[0]


def test_custom_stats_skip_episodes_that_did_not_log_a_name():
    assert custom_metric_stats({"x": [1.0, math.nan, 3.0], "y": [math.nan]}) == {
        "x_mean": 2.0, "x_min": 1.0, "x_max": 3.0}


def test_the_window_keeps_custom_values_with_their_episodes_and_in_its_state():
    window = EpisodeWindow(3)
    window.add([1.0, 2.0], [10, 20], {"x": [5.0, math.nan]})
    window.add([3.0, 4.0], [30, 40], {"x": np.array([7.0, 9.0]), "y": [1.0, 2.0]})
    # the window holds the last 3 episodes: (2, -), (3, x=7 y=1), (4, x=9 y=2)
    assert window.custom_stats() == {"x_mean": 8.0, "x_min": 7.0, "x_max": 9.0,
                                     "y_mean": 1.5, "y_min": 1.0, "y_max": 2.0}
    assert window.stats()["episode_return_mean"] == 3.0
    window.add([5.0], [50])  # no callbacks' values for it
    assert window.custom_stats()["x_mean"] == 8.0 and window.episodes_total == 5
    state = window.get_state()
    again = EpisodeWindow(3)
    again.set_state(state)
    assert again.custom_stats() == window.custom_stats() and list(again.returns) == [3.0, 4.0, 5.0]
    smaller = EpisodeWindow(2)  # a smaller window keeps the last episodes, values with them
    smaller.set_state(state)
    assert list(smaller.returns) == [4.0, 5.0] and smaller.custom_stats() == {
        "x_mean": 9.0, "x_min": 9.0, "x_max": 9.0, "y_mean": 2.0, "y_min": 2.0, "y_max": 2.0}
    # a state of the version before (no "custom") loads with no values
    old = EpisodeWindow(3)
    old.set_state({"returns": np.array([1.0]), "lengths": np.array([2]), "episodes_total": 1})
    assert old.custom_stats() == {}
    # values that fit no episode are not kept
    window.add([6.0], [60], {"x": [1.0, 2.0]})
    assert window.custom[-1] == {}
