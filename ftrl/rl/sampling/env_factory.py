"""Create environments from a gymnasium id, an import path "pkg.mod:make_env", or an
Atari game with the standard wrappers, "atari:ALE/Pong-v5" (`ftrl.rl.sampling.atari`).

An import path names a callable taken as `make_env(env_config) -> gymnasium.Env`; the
config it gets is an `EnvContext` (RLlib's): the `env_config` dict, with `worker_index`,
`vector_index`, `num_workers` and `remote` as attributes. An import path naming a
gymnasium.Env class is called as RLlib calls it, `Env(env_context)`, when its `__init__`
has exactly one required positional parameter that `env_config` does not name; else with
keyword arguments, `Env(**env_config)`. Anything else goes to `gymnasium.make(env,
**env_config)` (so gymnasium's own "module:EnvId-v0" form still works when the attribute
is not a callable). Errors become ConfigError with gymnasium's message (which suggests
close ids).

`max_episode_steps` (`environment(max_episode_steps=N)`, gymnasium's name; RLlib's old
`horizon`) puts a time limit on any env: the smaller of it and a registered limit wins;
the runners bootstrap the cut episode from its last observation as for any truncation.
On an Atari game the limit counts the game's agent steps over all its lives (as ALE's own
frame cap), so a cut game starts over at the next reset.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from ftrl.rl.sampling.atari import EVALUATION_ENV_CONFIG as ATARI_EVALUATION_ENV_CONFIG
from ftrl.rl.sampling.atari import atari_id, make_atari
from ftrl.util.imports import import_object
from ftrl.wire.errors import ConfigError


class EnvContext(dict):
    """An env's `env_config` (a dict) with where the env runs, as RLlib's EnvContext:
    `worker_index` (0: the driver's own env, 1..N: runner N), `vector_index` (the sub-env
    within its runner), `num_workers` (the runners of the job) and `remote` (whether it
    runs in a sub-env process of its own, `remote_worker_envs`)."""

    def __init__(self, env_config: dict | None = None, worker_index: int = 0, vector_index: int = 0,
                 num_workers: int = 0, remote: bool = False) -> None:
        super().__init__(env_config or {})
        self.worker_index = int(worker_index)
        self.vector_index = int(vector_index)
        self.num_workers = int(num_workers)
        self.remote = bool(remote)

    def where(self) -> dict[str, Any]:
        """The attributes, as plain values (what a sub-env process is sent)."""
        return {"worker_index": self.worker_index, "vector_index": self.vector_index,
                "num_workers": self.num_workers, "remote": self.remote}


def takes_env_context(cls: type, env_config: dict) -> bool:
    """Whether Env class `cls` is built as `cls(env_context)` (RLlib's style): its
    `__init__` has exactly one required positional parameter, and `env_config` has no key
    of that name (then it is a keyword-style class: `cls(**env_config)`)."""
    try:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # past self
    except (TypeError, ValueError):
        return False
    required = [p for p in params if p.default is p.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(required) == 1 and required[0].name not in env_config


def resolve_creator(env: str) -> Callable[[EnvContext], gym.Env] | None:
    """The callable an import path "pkg.mod:fn" names (an Env class: how it is called,
    `takes_env_context`), or None if `env` is not one."""
    if ":" not in env:
        return None
    try:
        target: Any = import_object(env)
    except (ImportError, ValueError):  # not ours: gymnasium's "module:EnvId-v0" or an error
        return None
    if isinstance(target, type) and issubclass(target, gym.Env):
        return lambda context: target(context) if takes_env_context(target, context) else target(**context)
    return target if callable(target) else None


def make_env(env: str, env_config: dict | None = None, *, context: EnvContext | None = None,
             max_episode_steps: int | None = None) -> gym.Env:
    """Build one environment instance; `context`: where it runs (its `env_config` is
    replaced by `env_config`); `max_episode_steps`: a time limit (module docstring).
    Raises ConfigError for unknown ids or creators that raise while constructing."""
    where = context.where() if context is not None else {}
    env_config = EnvContext(dict(env_config or {}), **where)
    ale_id = atari_id(env)
    creator = resolve_creator(env) if ale_id is None else None
    try:
        if ale_id is not None:
            instance = make_atari(ale_id, dict(env_config), max_episode_steps)
        elif creator is not None:
            instance = creator(env_config)
        else:
            instance = gym.make(env, **_registered_limit(env, max_episode_steps), **env_config)
    except ConfigError:
        raise
    except gym.error.Error as e:
        raise ConfigError(f"cannot make environment {env!r}: {e}") from e
    except Exception as e:
        raise ConfigError(
            f"environment creator for {env!r} raised {type(e).__name__}: {e}"
        ) from e
    if not isinstance(instance, gym.Env):
        raise ConfigError(
            f"environment creator for {env!r} returned {type(instance).__name__}, "
            "not a gymnasium.Env"
        )
    if max_episode_steps is not None and creator is not None:
        instance = gym.wrappers.TimeLimit(instance, int(max_episode_steps))  # an inner, smaller limit cuts first
    return instance


def _registered_limit(env: str, max_episode_steps: int | None) -> dict[str, int]:
    """gymnasium.make's `max_episode_steps` for a registered id: the smaller of the id's
    own limit and `max_episode_steps` (none given: the id's own, nothing passed)."""
    if max_episode_steps is None:
        return {}
    try:
        own = gym.spec(env).max_episode_steps
    except gym.error.Error:
        own = None  # an unknown id: gymnasium.make says so
    return {"max_episode_steps": int(max_episode_steps) if own is None else min(int(own), int(max_episode_steps))}


def evaluation_env_config(env: str, env_config: dict, evaluation_config: dict) -> dict:
    """The env_config of evaluation episodes: Atari's without episodic life and reward
    clipping, then the user's `evaluation_config["env_config"]` over it."""
    out = dict(env_config)
    if atari_id(env) is not None:
        out.update(ATARI_EVALUATION_ENV_CONFIG)
    out.update(evaluation_config.get("env_config", {}))
    return out


def with_render_mode(env: str, env_config: dict, render_mode: str = "rgb_array") -> dict:
    """`env_config` asking for frames: gymnasium ids and Atari take `render_mode` as
    gymnasium.make's keyword; a creator by import path gets it in its config dict (and
    must pass it on), an Env class by import path as its keyword argument."""
    return {**env_config, "render_mode": render_mode}


def probe_spaces(env: str, env_config: dict | None = None,
                 context: EnvContext | None = None) -> tuple[gym.Space, gym.Space]:
    """Construct one env to read its observation and action spaces, then close it."""
    instance = make_env(env, env_config, context=context)
    try:
        return instance.observation_space, instance.action_space
    finally:
        try:
            instance.close()
        except Exception:
            pass
