"""One episode of an evaluation runner's sub-env 0 as a video (videos while training,
`evaluation_video_interval`): frames rendered after its reset and after each step, then
encoded to a small MP4 that the runner hands to the driver with its evaluation.

    recorder = EpisodeRecorder(lambda: runner_envs[0].env, fps=50)
    recorder.episode_started()          # sub-env 0 began an episode (renders its first frame)
    recorder.stepped(reward, ended, failed)
    recorder.video()                    # {"mp4": bytes, "length", "return", "fps"} once done

An episode cut by a sub-env failure is dropped and the next one is recorded instead.
While recording, the runner resets ended episodes itself (not in the vector step), so the
last frame shows the episode's end, not the next one's start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ftrl.rl.video import check_frame, encode_mp4

log = logging.getLogger(__name__)


class EpisodeRecorder:
    """Records the next whole episode of one sub-env (module docstring)."""

    def __init__(self, env: Callable[[], Any], fps: int = 30) -> None:
        self._env = env
        self.fps = fps
        self.frames: list[Any] = []
        self.recording = False
        self.done = False
        self.length = 0
        self.total = 0.0

    def _frame(self) -> Any:
        return check_frame(self._env().render(), "render() of the evaluation env")

    def episode_started(self) -> None:
        """The sub-env began an episode: record it, unless one is recorded or recording."""
        if self.done or self.recording:
            return
        self.frames, self.length, self.total = [self._frame()], 0, 0.0
        self.recording = True

    def stepped(self, reward: float, ended: bool, failed: bool) -> None:
        """The sub-env took a step (`failed`: it failed, the episode is cut)."""
        if not self.recording:
            return
        if failed:
            self.recording, self.frames = False, []
            return
        self.frames.append(self._frame())
        self.length += 1
        self.total += float(reward)
        if ended:
            self.recording, self.done = False, True

    def video(self) -> dict[str, Any] | None:
        """The recorded episode as an MP4 ({"mp4", "length", "return", "fps"}), or None."""
        if not self.done:
            return None
        try:
            data = encode_mp4(self.frames, self.fps)
        except Exception as e:  # no imageio here: the evaluation goes on without its video
            log.warning("the evaluation's video was not encoded: %s", e)
            return None
        finally:
            self.frames = []
        return {"mp4": data, "length": self.length, "return": self.total, "fps": self.fps}


def sub_env_recorder(get_env: Callable[[], Any], remote: bool, worker_index: int) -> EpisodeRecorder | None:
    """A recorder of a runner's sub-env 0 (`get_env` gives its gymnasium env); None, logged,
    for sub-env processes (they do not render in the runner)."""
    if remote:
        log.warning("env runner %d: no evaluation video with remote_worker_envs (sub-envs render in their "
                    "own processes)", worker_index)
        return None
    fps = int((getattr(get_env(), "metadata", None) or {}).get("render_fps") or 30)
    return EpisodeRecorder(get_env, fps)
