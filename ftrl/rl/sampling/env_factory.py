"""Create environments from a gymnasium id, an import path "pkg.mod:make_env", or an
Atari game with the standard wrappers, "atari:ALE/Pong-v5" (`ftrl.rl.sampling.atari`).

An import path names a callable taken as `make_env(env_config) -> gymnasium.Env`.
Anything else goes to `gymnasium.make(env, **env_config)` (so gymnasium's own
"module:EnvId-v0" form still works when the attribute is not a callable).
Errors become ConfigError with gymnasium's message (which suggests close ids).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from ftrl.rl.sampling.atari import EVALUATION_ENV_CONFIG as ATARI_EVALUATION_ENV_CONFIG
from ftrl.rl.sampling.atari import atari_id, make_atari
from ftrl.util.imports import import_object
from ftrl.wire.errors import ConfigError


def resolve_creator(env: str) -> Callable[[dict], gym.Env] | None:
    """The callable an import path "pkg.mod:fn" names, or None if `env` is not one."""
    if ":" not in env:
        return None
    try:
        target: Any = import_object(env)
    except (ImportError, ValueError):  # not ours: gymnasium's "module:EnvId-v0" or an error
        return None
    if isinstance(target, type) and issubclass(target, gym.Env):
        return lambda config: target(**config)
    return target if callable(target) else None


def make_env(env: str, env_config: dict | None = None) -> gym.Env:
    """Build one environment instance. Raises ConfigError for unknown ids or creators
    that raise while constructing."""
    env_config = dict(env_config or {})
    ale_id = atari_id(env)
    creator = resolve_creator(env) if ale_id is None else None
    try:
        if ale_id is not None:
            instance = make_atari(ale_id, env_config)
        elif creator is not None:
            instance = creator(env_config)
        else:
            instance = gym.make(env, **env_config)
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
    return instance


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


def probe_spaces(env: str, env_config: dict | None = None) -> tuple[gym.Space, gym.Space]:
    """Construct one env to read its observation and action spaces, then close it."""
    instance = make_env(env, env_config)
    try:
        return instance.observation_space, instance.action_space
    finally:
        try:
            instance.close()
        except Exception:
            pass
