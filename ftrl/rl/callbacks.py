"""User code around the training loop: `ftrl.Callbacks` (RLlib 2.x's hooks), named by
import path (`config.callbacks("pkg.mod:MyCallbacks")`; nothing is pickled), and the
`MetricsLogger` the hooks log their own metrics to.

    class MyCallbacks(ftrl.Callbacks):
        def on_episode_end(self, *, episode, metrics_logger, **kwargs):
            metrics_logger.log_value("pole_angle", abs(episode.get_infos(-1)["angle"]))

Every hook is called with keyword arguments only and takes `**kwargs`, so arguments can
be added later without breaking a user's class. Episode hooks (`on_episode_start`,
`on_episode_step`, `on_episode_end`) and `on_sample_end` run in the env runner; the
others in the driver. Where they run, a raising hook is logged once (with its traceback)
and counted, and the loop goes on (`HookCaller`).

Metrics: `metrics_logger.log_value(name, value, reduce="mean")`. In an episode hook the
values logged during one episode are reduced (mean, min, max or sum) to that episode's
value; every metrics row then carries `custom_metrics = {"NAME_mean", "NAME_min",
"NAME_max"}` over the episodes of the return window (the last 100). Logged in a driver
hook (or `on_sample_end`), `custom_metrics["NAME"]` is that iteration's reduced value.
A name that is no plain identifier, or a value that is no finite real number, is dropped
and counted, its name logged once. Torch-free.
"""

from __future__ import annotations

import logging
import math
import numbers
import traceback
from collections.abc import Mapping
from typing import Any

from ftrl.config.user_code import import_user_class
from ftrl.wire.errors import ConfigError

log = logging.getLogger(__name__)

#: the hooks that run in an env runner, per episode
EPISODE_HOOKS = ("on_episode_start", "on_episode_step", "on_episode_end")
#: every hook, in RLlib 2.x's names
HOOKS = (
    "on_algorithm_init", *EPISODE_HOOKS, "on_sample_end", "on_train_result", "on_evaluate_end",
    "on_checkpoint_loaded", "on_algorithm_end",
)
#: how the values of one name logged in one episode (or iteration) become one value
REDUCE = ("mean", "min", "max", "sum")


class Callbacks:
    """Base class of a user's callbacks: override the hooks you need. Each is called with
    keyword arguments only (take `**kwargs`); what each gets:

    - `on_algorithm_init(algorithm, metrics_logger)`: the driver was built (and resumed).
    - `on_episode_start(episode, env_runner, metrics_logger, env_index, env)`: a new
      episode's first observation is in (`env`: the gymnasium env of an in-process
      sub-env, None for a sub-env process).
    - `on_episode_step(...)`: the same, after each step of the episode.
    - `on_episode_end(...)`: the same, after its last step (not for an episode cut by a
      sub-env failure: it is never reported).
    - `on_sample_end(env_runner, samples, metrics_logger)`: a fragment was sampled.
    - `on_train_result(algorithm, result, metrics_logger)`: before the row is written:
      what the hook changes in `result` is what the row holds.
    - `on_evaluate_end(algorithm, evaluation_metrics, metrics_logger)`.
    - `on_checkpoint_loaded(algorithm, metrics_logger)`: the driver resumed from a state
      or took a donor's (PBT exploit).
    - `on_algorithm_end(algorithm, reason)` (ftrl's, not RLlib's): the run ended (its
      last row and checkpoint are written; `reason` as result.json's `stop_reason`): a
      logger finishes its run here. Not called for a driver killed outright.
    """

    def on_algorithm_init(self, **kwargs: Any) -> None:
        """The driver was built."""

    def on_episode_start(self, **kwargs: Any) -> None:
        """An episode began (in the env runner)."""

    def on_episode_step(self, **kwargs: Any) -> None:
        """An episode took a step (in the env runner)."""

    def on_episode_end(self, **kwargs: Any) -> None:
        """An episode ended (in the env runner)."""

    def on_sample_end(self, **kwargs: Any) -> None:
        """A runner sampled a fragment (in the env runner)."""

    def on_train_result(self, **kwargs: Any) -> None:
        """An iteration's result, before its row is written (in the driver)."""

    def on_evaluate_end(self, **kwargs: Any) -> None:
        """An evaluation ended (in the driver)."""

    def on_checkpoint_loaded(self, **kwargs: Any) -> None:
        """The driver loaded a state (resume or exploit)."""

    def on_algorithm_end(self, **kwargs: Any) -> None:
        """The run ended (in the driver)."""


def load_callbacks(path: str | None) -> type[Callbacks] | None:
    """The `Callbacks` subclass `path` names ("pkg.mod:MyCallbacks"), or None for None;
    ConfigError naming `callbacks_class` when it does not import or is no subclass."""
    if path is None:
        return None
    return import_user_class("callbacks_class", path, Callbacks, "a subclass of ftrl.Callbacks")


def check_callbacks(config: Any) -> None:
    """ConfigError naming callbacks_class unless `config`'s imports as a subclass of
    `ftrl.Callbacks` (imports the user's module: call it where that code is importable)."""
    load_callbacks(config.callbacks_cfg.callbacks_class)


def overridden_hooks(cls: type[Callbacks]) -> frozenset[str]:
    """The hooks `cls` overrides (the others cost nothing: they are never called)."""
    return frozenset(h for h in HOOKS if getattr(cls, h) is not getattr(Callbacks, h))


def build_callbacks(path: str | None) -> Callbacks | None:
    """An instance of the class `path` names (None for None); ConfigError as `load_callbacks`,
    or when its constructor raises."""
    cls = load_callbacks(path)
    if cls is None:
        return None
    try:
        return cls()
    except Exception as e:
        raise ConfigError(f"callbacks_class {path!r}: its constructor raised {type(e).__name__}: {e}") from e


class Drops:
    """Custom metric values dropped (bad name or value), shared by the loggers of one
    runner or driver; each name is logged once (`where` says whose)."""

    def __init__(self, where: str = "") -> None:
        self.where = where
        self.count = 0
        self._warned: set[str] = set()

    def drop(self, name: Any, why: str) -> None:
        self.count += 1
        key = str(name)[:80]
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%scustom metric %r dropped: %s (counted in num_custom_metrics_dropped; "
                        "logged once per name)", f"{self.where}: " if self.where else "", key, why)


class MetricsLogger:
    """What a hook logs its own metrics to: `log_value(name, value, reduce="mean")`.

    Values are kept per name with the reduce the first value of the name was logged with
    (a later, different reduce for the same name is dropped). `reduce_all()` gives one
    value per name and empties the logger. A bad name or value is dropped and counted
    in `drops` (shared by a runner's or driver's loggers). `values` ({name: [reduce,
    values]}) is where values go: the runner points one logger at each episode's own
    store before calling that episode's hook (no logger per episode)."""

    __slots__ = ("_names_ok", "drops", "values")

    def __init__(self, drops: Drops | None = None) -> None:
        self.drops = drops if drops is not None else Drops()
        self.values: dict[str, list] = {}
        self._names_ok: set[str] = set()  # names checked once (the fast path)

    def log_value(self, name: str, value: Any, reduce: str = "mean", **kwargs: Any) -> None:
        """Log `value` under `name` (a plain identifier); `reduce`: mean, min, max or sum."""
        kind = type(value)
        try:
            fast = ((kind is float or kind is int) and name in self._names_ok and reduce in _REDUCE_SET
                    and _isfinite(value))
        except OverflowError:  # an int beyond float's range
            fast = False
        if not fast:
            why = _refusal(name, value, reduce)
            if why is not None:
                self.drops.drop(name, why)
                return
            value = float(value.item() if hasattr(value, "item") else value)
            self._names_ok.add(name)
        entry = self.values.get(name)
        if entry is None:
            self.values[name] = [reduce, [value]]
        elif entry[0] == reduce:
            entry[1].append(value)
        else:
            self.drops.drop(name, f"logged with reduce={entry[0]!r} before, now {reduce!r}")

    def peek(self) -> dict[str, float]:
        """One value per name logged so far (not emptied)."""
        return reduce_values(self.values)

    def reduce_all(self) -> dict[str, float]:
        """One value per name, and the logger emptied."""
        out = reduce_values(self.values)
        self.values.clear()
        return out

    def reductions(self) -> dict[str, tuple[float, str]]:
        """{name: (its one value, its reduce)}, and the logger emptied (to log them on
        elsewhere with the same reduce)."""
        out = {name: (_reduce(values, how), how) for name, (how, values) in self.values.items()}
        self.values.clear()
        return out


_REDUCE_SET = frozenset(REDUCE)
_isfinite = math.isfinite


def reduce_values(values: Mapping[str, list]) -> dict[str, float]:
    """{name: one value} of a logger's store ({name: [reduce, values]})."""
    return {name: _reduce(logged, how) for name, (how, logged) in values.items()}


def _refusal(name: Any, value: Any, reduce: Any) -> str | None:
    """Why (name, value, reduce) cannot be logged, or None."""
    if not isinstance(name, str) or not name.isidentifier():
        return "its name is not a plain identifier (letters, digits, underscores)"
    if reduce not in REDUCE:
        return f"reduce must be one of {list(REDUCE)}, got {reduce!r}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        try:  # a numpy scalar or 0-d array
            value = value.item() if hasattr(value, "item") and getattr(value, "size", 1) == 1 else value
        except (TypeError, ValueError):
            pass
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return f"its value is no real number ({type(value).__name__})"
    try:
        if not math.isfinite(float(value)):
            return "its value is NaN or inf"
    except OverflowError:
        return "its value is beyond a float's range"
    return None


def _reduce(values: list[float], how: str) -> float:
    if len(values) == 1:
        return float(values[0])
    if how == "min":
        return float(min(values))
    if how == "max":
        return float(max(values))
    if how == "sum":
        return float(sum(values))
    return float(sum(values) / len(values))


class HookCaller:
    """Calls a user's hooks: an exception is logged once per hook (with its traceback, as
    `where` names the caller) and counted (`errors`), and the caller goes on. Loggers
    made for these hooks count their dropped values in `drops`."""

    def __init__(self, callbacks: Callbacks, where: str) -> None:
        self.callbacks = callbacks
        self.where = where
        self.hooks = overridden_hooks(type(callbacks))
        self.errors = 0
        #: custom values dropped by every logger these hooks log to
        self.drops = Drops(where)
        self._logged: set[str] = set()

    def counts(self) -> dict[str, int]:
        """Cumulative: hooks that raised, custom values dropped."""
        return {"num_callback_errors": self.errors, "num_custom_metrics_dropped": self.drops.count}

    def __contains__(self, hook: str) -> bool:
        return hook in self.hooks

    def bound(self, hook: str) -> Any:
        """The user's `hook` as a bound method, or None when not overridden (for a hot path
        that calls it itself, and reports what it raises to `failed`)."""
        return getattr(self.callbacks, hook) if hook in self.hooks else None

    def call(self, hook: str, **kwargs: Any) -> bool:
        """Call `hook` with `kwargs` if the user's class overrides it; False if it raised."""
        if hook not in self.hooks:
            return True
        try:
            getattr(self.callbacks, hook)(**kwargs)
        except Exception:
            self.failed(hook)
            return False
        return True

    def failed(self, hook: str) -> None:
        """`hook` raised (call this in the `except` block: it logs the traceback): counted,
        and logged the first time."""
        self.errors += 1
        if hook not in self._logged:
            self._logged.add(hook)
            log.error("%s: callback %s.%s raised (counted in num_callback_errors; logged once per "
                      "hook):\n%s", self.where, type(self.callbacks).__name__, hook, traceback.format_exc())


def custom_metric_stats(values: Mapping[str, list[float]]) -> dict[str, float]:
    """{"NAME_mean", "NAME_min", "NAME_max"} of each name's per-episode values (NaN: the
    episode did not log it)."""
    out: dict[str, float] = {}
    for name, column in sorted(values.items()):
        kept = [v for v in column if v == v]
        if kept:
            out[f"{name}_mean"] = float(sum(kept) / len(kept))
            out[f"{name}_min"] = float(min(kept))
            out[f"{name}_max"] = float(max(kept))
    return out
