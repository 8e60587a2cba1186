"""The episode side of a user's callbacks, in the env runner: an `Episode` per sub-env
(RLlib's `len(episode)`, `get_return()`, `get_infos()`, `get_rewards()`, `id_`,
`custom_data`), the episode hooks called with it, and each finished episode's custom
metrics, handed out with its return and length.

    hooks = EpisodeHooks.create(caller, runner, num_envs, env_of)   # None: no episode hooks
    hooks.infos                  # the list the vector step writes each step's info into
    hooks.start(i, episode_id)   # a new episode's first observation is in
    hooks.stepped(rewards, ended, failed)   # after each vector step
    hooks.end(i)                 # episode i ended: its custom values kept
    hooks.take()                 # {name: [value per finished episode, NaN if not logged]}

With no callbacks, or callbacks that override no episode hook, there is no
`EpisodeHooks` and the runner's hot loop is the same as without (no infos kept).
"""

from __future__ import annotations

import collections
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

from ftrl.rl.callbacks import EPISODE_HOOKS, HookCaller, MetricsLogger, reduce_values


class Episode:
    """One sub-env's episode so far, as RLlib's `SingleAgentEpisode` shows it to callbacks.

    `id_`: unique in the run (runner index and a count); `env_index`: the sub-env;
    `custom_data`: a dict of the user's that lives from `on_episode_start` to
    `on_episode_end`. Infos and rewards are one per step (the reset's info is not kept)."""

    __slots__ = ("custom_data", "env_index", "failed", "id_", "infos", "metrics", "rewards", "worker_index")

    def __init__(self, id_: int, env_index: int, worker_index: int) -> None:
        self.id_ = id_
        self.env_index = env_index
        self.worker_index = worker_index
        self.custom_data: dict[str, Any] = {}
        self.infos: list[Any] = []
        self.rewards: list[float] = []
        self.metrics: dict[str, list] = {}  # what its hooks logged (a MetricsLogger's store)
        self.failed = False  # a hook of it raised: its custom values are dropped

    def __len__(self) -> int:
        return len(self.rewards)

    def get_return(self) -> float:
        """The sum of the episode's rewards so far."""
        return float(math.fsum(self.rewards))

    def get_infos(self, indices: int | slice | None = None) -> Any:
        """Every step's info (a list), or `infos[indices]` (-1: the newest)."""
        return list(self.infos) if indices is None else self.infos[indices]

    def get_rewards(self, indices: int | slice | None = None) -> Any:
        """Every step's reward (a list), or `rewards[indices]`."""
        return list(self.rewards) if indices is None else self.rewards[indices]

    def __repr__(self) -> str:
        return f"Episode(id_={self.id_}, env_index={self.env_index}, len={len(self)})"


_NO_VALUES: dict[str, float] = {}
_invoke = operator.call
#: run an iterator to its end in C, keeping nothing
_append_all = collections.deque(maxlen=0).extend


class EpisodeHooks:
    """The runner's open episodes, the episode hooks called on them, and the custom values
    of the episodes finished since the last `take()` (module docstring). The hooks are
    called straight (bound methods, one logger pointed at each episode's store): this is
    the sampling loop's path, measured by benchmarks/callbacks.py."""

    def __init__(self, caller: HookCaller, runner: Any, num_envs: int, env_of: Callable[[int], Any]) -> None:
        self.caller = caller
        self.runner = runner
        self.env_of = env_of
        self.logger = MetricsLogger(caller.drops)
        self.infos: list[Any] = [None] * num_envs
        self.episodes: list[Episode | None] = [None] * num_envs
        # each sub-env's open episode's `rewards.append` and `infos.append`, so that a
        # step with no step hook is two loops in C (`_append_all`); a sub-env with no
        # open episode appends to a scratch list emptied each step
        self._scratch: list[Any] = []
        self._reward_appends: list[Callable[[Any], None]] = [self._scratch.append] * num_envs
        self._info_appends: list[Callable[[Any], None]] = [self._scratch.append] * num_envs
        self._on_start = caller.bound("on_episode_start")
        self._on_step = caller.bound("on_episode_step")
        self._on_end = caller.bound("on_episode_end")
        self._done: list[dict[str, float]] = []

    @classmethod
    def create(cls, caller: HookCaller | None, runner: Any, num_envs: int,
               env_of: Callable[[int], Any]) -> EpisodeHooks | None:
        """The episode hooks of the user's callbacks for `runner`, or None when they have none."""
        if caller is None or not any(h in caller for h in EPISODE_HOOKS):
            return None
        return cls(caller, runner, num_envs, env_of)

    def _call(self, hook: Callable[..., Any], name: str, i: int, episode: Episode) -> None:
        logger = self.logger
        logger.values = episode.metrics
        try:
            hook(episode=episode, env_runner=self.runner, metrics_logger=logger, env_index=i, env=self.env_of(i),
                 worker_index=self.runner.worker_index)
        except Exception:
            self.caller.failed(name)
            episode.failed = True

    def start(self, i: int, episode_id: int) -> None:
        """Sub-env i begins episode `episode_id` (an open one there was cut: forgotten)."""
        episode = Episode(int(episode_id), i, self.runner.worker_index)
        self.episodes[i] = episode
        self._reward_appends[i] = episode.rewards.append
        self._info_appends[i] = episode.infos.append
        if self._on_start is not None:
            self._call(self._on_start, "on_episode_start", i, episode)

    def stepped(self, rewards: Sequence[float], ended: Sequence[int], failed: Any) -> None:
        """After a vector step: each open episode's reward and info, and `on_episode_step`
        for those that go on (ended ones get `on_episode_end` from `end`; failed ones are cut)."""
        if failed or self._on_step is not None:
            self._stepped_with_hook(rewards, ended, failed)
            return
        _append_all(map(_invoke, self._reward_appends, rewards))
        _append_all(map(_invoke, self._info_appends, self.infos))
        self._scratch.clear()

    def _stepped_with_hook(self, rewards: Sequence[float], ended: Sequence[int], failed: Any) -> None:
        on_step, infos = self._on_step, self.infos
        for i, episode in enumerate(self.episodes):
            if episode is None or (failed and i in failed):
                continue
            episode.rewards.append(rewards[i])
            episode.infos.append(infos[i])
            if on_step is not None and i not in ended:
                self._call(on_step, "on_episode_step", i, episode)

    def end(self, i: int) -> None:
        """Sub-env i's episode ended: `on_episode_end`, then its custom values are kept."""
        episode = self.episodes[i]
        self.episodes[i] = None
        self._reward_appends[i] = self._info_appends[i] = self._scratch.append
        if episode is None:  # (cannot happen: every episode is started) nothing logged
            self._done.append(_NO_VALUES)
            return
        if self._on_end is not None:
            self._call(self._on_end, "on_episode_end", i, episode)
        metrics = episode.metrics
        self._done.append(reduce_values(metrics) if metrics and not episode.failed else _NO_VALUES)

    def take(self) -> dict[str, list[float]]:
        """{name: one value per episode finished since the last take (NaN: not logged)}."""
        done, self._done = self._done, []
        names = sorted({name for values in done for name in values})
        return {name: [values.get(name, math.nan) for values in done] for name in names}
