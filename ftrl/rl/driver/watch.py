"""Watch a trained policy: episodes in this process with a loaded algorithm's actions
(greedy by default; a recurrent policy's state carried through each episode), and an
MP4 per episode when asked (`ftrl evaluate`).

    algo = Algorithm.from_checkpoint("runs/cartpole")
    out = watch(algo, episodes=5, seed=0, video_dir=Path("videos"))
    out["returns"], out["lengths"], out["videos"]

The env is made as the evaluation runners make it (Atari without episodic life or reward
clipping, the evaluation env_config over the training one). With `video_dir` it is made
with render_mode="rgb_array" (`with_render_mode`: a gymnasium id or Atari takes it as
gymnasium.make's keyword; a creator by import path finds it in its env_config and must
pass it on; an Env class by import path gets it as a keyword argument), and an env
that renders no RGB frame is refused before the first episode. A video holds the frame
after the reset and one per step: the episode's length + 1 frames.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ftrl.rl.driver.metrics import EpisodeWindow
from ftrl.rl.sampling.env_factory import evaluation_env_config, make_env, with_render_mode
from ftrl.rl.video import check_frame, write_mp4
from ftrl.wire.errors import ConfigError


def watch(algo: Any, *, episodes: int, seed: int | None = None, video_dir: Path | None = None,
          explore: bool = False, max_steps: int = 1_000_000,
          on_episode: Callable[[int, float, int, Path | None], Any] | None = None) -> dict[str, Any]:
    """Run `episodes` episodes of `algo`'s policy (`max_steps` bounds each); returns
    {"returns", "lengths", "videos"}. `on_episode(index, return, length, video)` after each."""
    if episodes < 1:
        raise ConfigError(f"episodes must be at least 1, got {episodes}")
    cfg = algo.config
    env_id = cfg.environment_cfg.env
    env_config = evaluation_env_config(env_id, dict(cfg.environment_cfg.env_config),
                                       cfg.evaluation_cfg.evaluation_config)
    if video_dir is not None:
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame (classic control) renders off screen
        env_config = with_render_mode(env_id, env_config)
    env = make_env(env_id, env_config, max_episode_steps=cfg.environment_cfg.max_episode_steps)
    returns: list[float] = []
    lengths: list[int] = []
    videos: list[str] = []
    try:
        if video_dir is not None and getattr(env, "render_mode", None) != "rgb_array":
            raise ConfigError(
                f"--video: {env_id!r} does not render RGB frames (its render_mode is "
                f"{getattr(env, 'render_mode', None)!r}); a creator or Env class by import path gets "
                "render_mode='rgb_array' in its env_config and must pass it on to its env")
        fps = int((getattr(env, "metadata", None) or {}).get("render_fps") or 30)
        if video_dir is not None:  # one frame now: an env that cannot render fails before any episode
            env.reset(seed=seed)
            _render(env, env_id)
        try:  # a recurrent policy carries its state through each episode, from its start state
            start_state = algo.get_initial_state()
        except ValueError:
            start_state = None
        recurrent = start_state is not None
        for index in range(episodes):
            obs, _ = env.reset(seed=None if seed is None else seed + index)
            frames = [_render(env, env_id)] if video_dir is not None else []
            total, steps = 0.0, 0
            state, action, reward = start_state, None, 0.0
            while steps < max_steps:
                if recurrent:
                    action, state = algo.compute_single_action(obs, state, prev_action=action, prev_reward=reward,
                                                               explore=explore)
                else:
                    action = algo.compute_single_action(obs, explore=explore)
                obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                steps += 1
                if video_dir is not None:
                    frames.append(_render(env, env_id))
                if terminated or truncated:
                    break
            video = write_mp4(video_dir / f"episode_{index:04d}.mp4", frames, fps) if video_dir is not None else None
            returns.append(total)
            lengths.append(steps)
            if video is not None:
                videos.append(str(video))
            if on_episode is not None:
                on_episode(index, total, steps, video)
    finally:
        env.close()
    return {"returns": returns, "lengths": lengths, "videos": videos}


def _render(env: Any, env_id: str) -> Any:
    """One RGB frame of `env`; ConfigError when it cannot render one."""
    try:
        frame = env.render()
    except Exception as e:
        raise ConfigError(f"--video: rendering {env_id!r} failed: {type(e).__name__}: {e}") from e
    return check_frame(frame, f"{env_id!r} render()")


def summary(returns: list[float], lengths: list[int]) -> dict[str, Any]:
    """Return mean/min/max and mean length of watched episodes (as a metrics row has them)."""
    episodes = EpisodeWindow(max(1, len(returns)))
    episodes.add(returns, lengths)
    return {"episodes": episodes.episodes_total, **episodes.stats()}
