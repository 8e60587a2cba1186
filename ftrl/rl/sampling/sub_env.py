"""One sub-environment of an EnvRunner, in this process or in a child process.

Both kinds have the same interface: `reset(seed) -> obs`, `step(action) -> (obs,
reward, terminated, truncated, info)` or the same split as `step_start(action)` then
`step_finish()`, and `close()`. A child sends the step's info only when asked
(`keep_info`: the runner's episode callbacks read it), and then only the values that
cross processes (`wire_info`: numbers, strings, booleans, numpy arrays, and lists and
dicts of them); anything else is dropped and counted (`info_values_dropped`).
Splitting step in two lets the runner start every remote sub-env before waiting on any,
so child processes step in parallel; for in-process sub-envs `step_start` only stores
the action.

Any failure of the environment (an exception in reset/step, a dead or hung child
process) raises `SubEnvError`, so the runner can tell it apart from its own bugs.
Construction errors (unknown id, a creator that raises, an unsupported space) raise
ConfigError in-process and SubEnvError from a child. Each sub-env has `.spec`.

A remote sub-env is `python -m ftrl.rl.sampling.sub_env FD` started with `subprocess` and
connected by a socketpair. Messages are `ftrl.util.framing` frames (little-endian u32
length, 1 GiB cap) of `ftrl.wire.codec` msgpack: nothing is pickled either way, and the
child's stdout stays free for the environment's own prints.
    parent -> child: ["init", env, env_config, keep_info] | ["reset", seed] | ["step", action] | ["close"]
    child -> parent: ["ok", payload] | ["err", type, message, traceback]
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import traceback
from typing import Any

import numpy as np

from ftrl.rl.spaces import SpaceSpec, space_spec
from ftrl.util.framing import FrameTooLargeError, Framing
from ftrl.wire import codec

_MAX_FRAME = 1 << 30
_FRAMING = Framing("little", _MAX_FRAME, name="sub-env socket")


class SubEnvError(RuntimeError):
    """A sub-environment failed: it raised, or its process died or hung."""

    def __init__(self, index: int, message: str, remote_traceback: str = ""):
        super().__init__(f"sub-environment {index}: {message}")
        self.index = index
        self.remote_traceback = remote_traceback


def reset_error(index: int, error: BaseException) -> SubEnvError:
    """The SubEnvError of sub-env `index` whose reset raised `error` (its cause)."""
    err = SubEnvError(index, f"reset raised {type(error).__name__}: {error}")
    err.__cause__ = error
    return err


class LocalSubEnv:
    """A sub-env living in the runner's own process."""

    def __init__(self, index: int, env: str, env_config: dict, where: dict | None = None,
                 max_episode_steps: int | None = None):
        from ftrl.rl.sampling.env_factory import EnvContext, make_env

        self.index = index
        self.env = make_env(env, env_config, context=EnvContext(**(where or {})),
                            max_episode_steps=max_episode_steps)
        self._action: Any = None
        try:
            self.spec = space_spec(self.env.observation_space, self.env.action_space)
        except Exception:
            self.close()
            raise

    def reset(self, seed: int | None = None) -> Any:
        try:
            obs, _ = self.env.reset(seed=seed)
        except Exception as e:
            raise reset_error(self.index, e) from e
        return obs

    def step(self, action: Any) -> tuple[Any, float, bool, bool, Any]:
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as e:
            raise SubEnvError(self.index, f"step raised {type(e).__name__}: {e}") from e
        return obs, reward, terminated, truncated, info

    def step_start(self, action: Any) -> None:
        self._action = action

    def step_finish(self) -> tuple[Any, float, bool, bool, Any]:
        return self.step(self._action)

    def close(self) -> None:
        try:
            self.env.close()
        except Exception:
            pass


class RemoteSubEnv:
    """A sub-env in its own child process, so a crashing simulator kills only itself.

    `RemoteSubEnv.start` starts the child and asks it for the env's spaces; the
    constructor only wraps a socket to a child already started (`proc`, None in tests).
    """

    def __init__(self, index: int, sock: socket.socket, proc: subprocess.Popen | None = None, *,
                 timeout_s: float = 60.0):
        self.index = index
        self.timeout_s = timeout_s
        self._sock = sock
        self._proc = proc
        sock.settimeout(timeout_s)
        self.spec: SpaceSpec | None = None  # the env's spaces, once `start` asked the child
        self.info_values_dropped = 0  # info values the child could not send (`wire_info`)

    @classmethod
    def start(cls, index: int, env: str, env_config: dict, timeout_s: float = 60.0,
              keep_info: bool = False, where: dict | None = None,
              max_episode_steps: int | None = None) -> RemoteSubEnv:
        """Start `python -m ftrl.rl.sampling.sub_env` serving `env`; its spaces in `.spec`.
        `keep_info`: the child sends each step's info (what crosses, `wire_info`);
        `where` and `max_episode_steps`: as `make_sub_env`'s."""
        parent, child = socket.socketpair()
        try:
            env_vars = dict(os.environ)
            env_vars["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
            proc = subprocess.Popen(
                [sys.executable, "-m", "ftrl.rl.sampling.sub_env", str(child.fileno())],
                pass_fds=(child.fileno(),),
                env=env_vars,
                stdin=subprocess.DEVNULL,
                close_fds=True,
            )
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        sub = cls(index, parent, proc, timeout_s=timeout_s)
        try:
            init = ["init", env, dict(env_config), bool(keep_info), dict(where or {}), max_episode_steps]
            sub.spec = SpaceSpec.from_dict(sub._request(init, what="init"))
        except SubEnvError:
            sub.close()
            raise
        return sub

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def _send(self, msg: list) -> None:
        try:
            frame = _FRAMING.pack(codec.encode(msg))
        except FrameTooLargeError as e:
            raise SubEnvError(self.index, f"cannot send {msg[0]}: {e}") from e
        try:
            self._sock.sendall(frame)
        except OSError as e:
            raise SubEnvError(self.index, f"process is gone ({self._exit_text()}): {e}") from e

    def _recv_some(self, n: int) -> bytes:
        try:
            return self._sock.recv(n)
        except TimeoutError as e:
            raise SubEnvError(self.index, f"no reply within {self.timeout_s}s (hung)") from e
        except OSError as e:
            raise SubEnvError(self.index, f"process is gone ({self._exit_text()}): {e}") from e

    def _recv(self, what: str) -> Any:
        try:
            data = _FRAMING.read(self._recv_some)
        except FrameTooLargeError as e:
            raise SubEnvError(self.index, f"reply to {what} is {e.size} bytes; too large") from e
        except EOFError as e:
            raise SubEnvError(self.index, f"process died ({self._exit_text()}): {e}") from e
        reply = codec.decode(data)
        if not isinstance(reply, list) or not reply:
            raise SubEnvError(self.index, f"malformed reply to {what}")
        if reply[0] == "ok":
            return reply[1] if len(reply) > 1 else None
        if reply[0] == "err" and len(reply) == 4:
            raise SubEnvError(self.index, f"{what} raised {reply[1]}: {reply[2]}", str(reply[3]))
        raise SubEnvError(self.index, f"malformed reply to {what}")

    def _request(self, msg: list, what: str) -> Any:
        self._send(msg)
        return self._recv(what)

    def _exit_text(self) -> str:
        if self._proc is None:
            return "not started"
        try:
            code = self._proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return "still running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"

    def reset(self, seed: int | None = None) -> Any:
        return self._request(["reset", seed], what="reset")

    def step_start(self, action: Any) -> None:
        self._send(["step", action])

    def step_finish(self) -> tuple[Any, float, bool, bool, Any]:
        reply = self._recv("step")
        if len(reply) == 6:  # the info kept, and how many of its values could not cross
            obs, reward, terminated, truncated, info, dropped = reply
            self.info_values_dropped += int(dropped)
            return obs, reward, terminated, truncated, info
        obs, reward, terminated, truncated = reply
        return obs, reward, terminated, truncated, None

    def step(self, action: Any) -> tuple[Any, float, bool, bool, Any]:
        self.step_start(action)
        return self.step_finish()

    def close(self) -> None:
        try:
            self._sock.settimeout(1.0)
            self._send(["close"])
        except (SubEnvError, OSError):
            pass
        try:
            self._sock.close()
        except OSError:
            pass
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def make_sub_env(
    index: int, env: str, env_config: dict, remote: bool, timeout_s: float = 60.0, keep_info: bool = False,
    where: dict | None = None, max_episode_steps: int | None = None,
) -> LocalSubEnv | RemoteSubEnv:
    """Create sub-env `index` in this process or in a child process (`keep_info`: it
    sends each step's info, see `wire_info`). `where`: the EnvContext attributes the env's
    creator sees (worker_index, vector_index, num_workers, remote); `max_episode_steps`:
    its time limit (`ftrl.rl.sampling.env_factory`)."""
    if remote:
        return RemoteSubEnv.start(index, env, env_config, timeout_s=timeout_s, keep_info=keep_info, where=where,
                                  max_episode_steps=max_episode_steps)
    return LocalSubEnv(index, env, env_config, where=where, max_episode_steps=max_episode_steps)


_WIRE_SCALARS = (bool, int, float, str, bytes, type(None))


def wire_info(info: Any) -> tuple[dict[str, Any], int]:
    """What of a step's info crosses processes: values that are numbers, strings,
    booleans, None, numpy arrays or scalars (of numbers or booleans), and lists and
    dicts (str keys) of them; the info as such a dict, and how many values were dropped."""
    if not isinstance(info, dict):
        return {}, 0 if info is None else 1
    out: dict[str, Any] = {}
    dropped = 0
    for key, value in info.items():
        kept, n = _wire_value(value, depth=0)
        dropped += n
        if n == 0 and isinstance(key, str):
            out[key] = kept
        elif n == 0:
            dropped += 1
    return out, dropped


def _wire_value(value: Any, depth: int) -> tuple[Any, int]:
    """(value as it crosses, 0) or (None, values dropped)."""
    if isinstance(value, _WIRE_SCALARS):
        return value, 0
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return value.item(), 0
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return value, 0
    if depth < 4 and isinstance(value, (list, tuple)):
        items = [_wire_value(v, depth + 1) for v in value]
        if all(n == 0 for _, n in items):
            return [v for v, _ in items], 0
        return None, 1
    if depth < 4 and isinstance(value, dict) and all(isinstance(k, str) for k in value):
        items2 = {k: _wire_value(v, depth + 1) for k, v in value.items()}
        if all(n == 0 for _, n in items2.values()):
            return {k: v for k, (v, _) in items2.items()}, 0
        return None, 1
    return None, 1


# --------------------------------------------------------------------------- child side


def _child_send(sock: socket.socket, msg: list) -> None:
    sock.sendall(_FRAMING.pack(codec.encode(msg)))


def _child_recv(sock: socket.socket) -> Any:
    """The parent's next message, or None once the parent is gone (EOF, even mid-frame)."""
    try:
        return codec.decode(_FRAMING.read(sock.recv))
    except EOFError:
        return None


def _child_main(fd: int) -> None:
    """Serve one environment over the socket until "close" or EOF."""
    from ftrl.rl.sampling.env_factory import EnvContext, make_env

    sock = socket.socket(fileno=fd)
    env = None
    keep_info = False
    while True:
        msg = _child_recv(sock)
        if msg is None:
            break
        cmd = msg[0]
        try:
            if cmd == "init":
                where = msg[4] if len(msg) > 4 else {}
                limit = msg[5] if len(msg) > 5 else None
                env = make_env(msg[1], msg[2], context=EnvContext(**where), max_episode_steps=limit)
                keep_info = len(msg) > 3 and bool(msg[3])
                reply: list = ["ok", space_spec(env.observation_space, env.action_space).to_dict()]
            elif cmd == "reset":
                obs, _ = env.reset(seed=msg[1])
                reply = ["ok", obs]
            elif cmd == "step":
                obs, reward, terminated, truncated, info = env.step(msg[1])
                reply = ["ok", [obs, float(reward), bool(terminated), bool(truncated)]]
                if keep_info:
                    reply[1].extend(wire_info(info))
            elif cmd == "close":
                break
            else:
                reply = ["err", "ValueError", f"unknown command {cmd!r}", ""]
        except Exception as e:
            reply = ["err", type(e).__name__, str(e), traceback.format_exc()]
        try:
            _child_send(sock, reply)
        except (codec.InvalidArgumentError, FrameTooLargeError) as e:
            _child_send(sock, ["err", type(e).__name__, f"cannot send the env's output: {e}", ""])
        except OSError:
            break
    if env is not None:
        try:
            env.close()
        except Exception:
            pass
    sock.close()


if __name__ == "__main__":
    _child_main(int(sys.argv[1]))
