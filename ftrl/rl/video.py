"""Episode videos as MP4 (H.264), encoded by imageio's ffmpeg (the `imageio-ffmpeg`
wheel ships the ffmpeg binary: `pip install 'ftrl[video]'`).

    data = encode_mp4(frames, fps=30)          # bytes of an MP4, one frame per item
    write_mp4(path, frames, fps=30)            # the same, written atomically
    count_frames(path)                         # read back (tests, checks)

Frames are H x W x 3 uint8 arrays (what `env.render()` gives with
render_mode="rgb_array"); an odd height or width is padded by one black row or column
(H.264 in yuv420p needs even sizes).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ftrl.util.files import atomic_write_bytes
from ftrl.wire.errors import ConfigError


def check_frame(frame: Any, what: str) -> np.ndarray:
    """`frame` as an H x W x 3 uint8 array; ConfigError naming `what` when it is not one."""
    arr = np.asarray(frame) if frame is not None else None
    if arr is None or arr.ndim != 3 or arr.shape[2] not in (3, 4) or arr.dtype != np.uint8:
        got = "None" if arr is None else f"{arr.dtype} array of shape {arr.shape}"
        raise ConfigError(f"{what} gave {got}, not an RGB frame (H x W x 3 uint8): the env needs "
                          "render_mode='rgb_array'")
    return arr[:, :, :3]


def _even(frame: np.ndarray) -> np.ndarray:
    h, w = frame.shape[:2]
    if h % 2 or w % 2:
        frame = np.pad(frame, ((0, h % 2), (0, w % 2), (0, 0)))
    return frame


def _imageio() -> Any:
    try:
        import imageio.v2 as imageio
        import imageio_ffmpeg  # noqa: F401  (the ffmpeg binary)
    except ImportError:
        raise ConfigError("videos need imageio and imageio-ffmpeg: pip install 'ftrl[video]'") from None
    return imageio


def encode_mp4(frames: Sequence[np.ndarray], fps: int = 30) -> bytes:
    """The MP4 of `frames` (at least one), as bytes."""
    if not frames:
        raise ValueError("a video needs at least one frame")
    imageio = _imageio()
    fd, tmp = tempfile.mkstemp(suffix=".mp4")
    os.close(fd)
    try:
        writer = imageio.get_writer(tmp, format="FFMPEG", mode="I", fps=max(1, int(fps)), codec="libx264",
                                    macro_block_size=1, ffmpeg_log_level="error",
                                    output_params=["-pix_fmt", "yuv420p"])
        try:
            for frame in frames:
                writer.append_data(_even(np.ascontiguousarray(frame[:, :, :3], np.uint8)))
        finally:
            writer.close()
        return Path(tmp).read_bytes()
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_mp4(path: str | Path, frames: Sequence[np.ndarray], fps: int = 30) -> Path:
    """Write the MP4 of `frames` to `path` (tmp, fsync, rename); the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, encode_mp4(frames, fps))
    return path


def count_frames(path: str | Path) -> int:
    """How many frames the video at `path` holds (decoded, not its header's estimate)."""
    imageio = _imageio()
    reader = imageio.get_reader(str(path), format="FFMPEG")
    try:
        return sum(1 for _ in reader)
    finally:
        reader.close()
