"""The sub-envs of an EnvRunner: their lifecycle and the bookkeeping of their episodes.

`SubEnvLifecycle` is the EnvRunner's base: it builds the sub-envs (each one built is
progress for the hung-env watchdog), resets, restarts and closes them, writes their
observations into the runner's arrays through its checked encoder, steps remote sub-env
processes in parallel, applies the sub-env failure policy (restart only the failed one,
or mark it broken and raise: see `ftrl.rl.sampling.env_runner`), and finishes episodes
(returns, lengths, fresh episode ids). What a sub-env is (`_create`) is the runner's.
The hot loop itself is `EnvRunner._steps` (one `vector_step` call per vector step).

Hung env (in-process sub-envs): a runner inside an actor process (a remote runner, or
the local runner of a job's driver actor) runs a `ProgressWatchdog` (ftrl.util.watchdog).
While `sample()`/`evaluate()` runs, each vector step stamps progress; if no step
completes for `env_step_timeout_s` the watchdog logs
`event=WATCHDOG_KILL ... reason="env step hung for X s ..."` and ends the process with
exit code `EXIT_WATCHDOG`, so the worker restarts it like any failed actor and the
driver's runner group recovers it (a driver that sampled itself restarts in place and
resumes from its newest checkpoint). Building the sub-envs (in the constructor and in
`reset_envs()`, a soft restart) is watched the same way (each sub-env built is progress;
one built in over `env_step_timeout_s` ends the process: "env construction hung ..."),
where a hung soft restart would otherwise hold the runner's lock for good. A Python-level
spin in `step` is caught (the watchdog thread still gets the GIL); a C extension spinning
while holding the GIL is not. With `remote_worker_envs=True` the per-sub-env timeout
(`sample_timeout_s`: a sub-env process that does not answer counts as hung) handles hung
sub-envs first: the
watchdog then waits at least `2 * sample_timeout_s + 10` s.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np

from ftrl.rl.sampling.atari import GameScores, atari_id
from ftrl.rl.sampling.episode_hooks import EpisodeHooks
from ftrl.rl.sampling.filters import MeanStdFilter, NoFilter
from ftrl.rl.sampling.recorder import EpisodeRecorder
from ftrl.rl.sampling.sub_env import SubEnvError, reset_error
from ftrl.rl.sampling.vector_step import sq_sum
from ftrl.rl.spaces import ObsEncoder, SpaceSpec
from ftrl.util.watchdog import ProgressWatchdog
from ftrl.wire.errors import ConfigError

log = logging.getLogger(__name__)

_EPISODE_ID_STRIDE = 1 << 40
_NO_RESETS: dict[int, Any] = {}
#: A runner logs at most this many sub-env failures a minute (a flaky env may fail often)
FAILURES_LOGGED_PER_MINUTE = 5


class _Unwatched:
    """Stands in for a ProgressWatchdog when none runs (in-process runners): the hot loop
    stamps it all the same (one attribute store) instead of testing for None."""

    stamp = 0.0

    def begin(self, what: str | None = None) -> None:
        pass

    def end(self) -> None:
        pass

    def close(self) -> None:
        pass


_UNWATCHED = _Unwatched()


class SubEnvLifecycle:
    """Sub-env lifecycle and episode bookkeeping (the EnvRunner's state, set up by its
    constructor; `_create(i)` builds sub-env i)."""

    num_envs: int
    worker_index: int
    env_id: str
    remote_envs: bool
    restart_sub_envs: bool
    max_restart_attempts: int
    spec: SpaceSpec
    encoder: ObsEncoder
    filter: NoFilter | MeanStdFilter
    policy: Any
    _seed: int | None
    _watchdog: ProgressWatchdog | _Unwatched
    _envs: list[Any]
    _seeded: list[bool]
    _restarts_of: list[int]
    _row_obs: bool
    _obs_dim: int
    _obs_misfits: dict[int, str]  # sub-env -> why its structured observation did not fit
    _failures_logged: tuple[float, int]  # (the minute's start, failures logged in it)
    _recurrent: bool  # the policy keeps a state per sub-env (use_lstm)
    _rnn_state: np.ndarray  # [E, state size], the policy's initial state at an episode's start
    _rnn_state_at_start: np.ndarray  # [state size]: that initial state
    _prev_action: np.ndarray  # [E, *action_row_shape]: the action each sub-env took last
    _prev_reward: np.ndarray  # [E]
    _seq_len: int  # max_seq_len: a fragment notes what its sequences start from every so many steps
    _obs: np.ndarray
    _ep_ids: np.ndarray
    _ep_ret: list[float]
    _ep_start: list[int]
    _vec_steps: int
    _next_episode: int
    _done_returns: list[float]
    _done_lengths: list[int]
    _needs_reset: bool
    _broken: set[int]
    _episode_hooks: EpisodeHooks | None
    _games: GameScores | None
    _recorder: EpisodeRecorder | None
    num_sub_env_restarts: int
    episodes_total: int
    info_values_dropped: int

    def _create(self, i: int) -> Any:
        """A new sub-env i (the runner's: in-process or a process, its env and config)."""
        raise NotImplementedError

    def _values(self, fobs: np.ndarray, rows: list[int] | None = None) -> np.ndarray:
        """V of (filtered) observations: of every sub-env, or of sub-envs `rows` (a
        recurrent policy reads their states)."""
        if not self._recurrent:
            return self.policy.value(fobs)
        sel = slice(None) if rows is None else rows
        return self.policy.value_step(fobs, self._rnn_state[sel], self._prev_action[sel], self._prev_reward[sel])

    # ------------------------------------------------------------------ recurrent policies (use_lstm)

    def _init_recurrent(self) -> None:
        """A state per sub-env (the initial one: episodes start), and the previous action and reward."""
        self._recurrent = bool(self.policy.recurrent)
        self._seq_len = int(self.config.model_config.max_seq_len)
        if self._recurrent:
            e = self.num_envs
            self._rnn_state = self.policy.initial_state(e)
            self._rnn_state_at_start = self._rnn_state[0].copy()
            self._prev_action = np.zeros((e, *self.spec.action_row_shape), self.spec.action_dtype)
            self._prev_reward = np.zeros(e, np.float32)

    def _recurrent_inputs(self, steps: int) -> dict[str, np.ndarray]:
        """Arrays for what each sequence of a fragment of `steps` starts from: every sub-env's
        state, previous action and reward before steps 0, L, 2L, ... (L = max_seq_len),
        [E, K, ...]; `_note_sequence_start` fills them."""
        e, k = self.num_envs, -(-steps // self._seq_len)
        return {"state_in": np.zeros((e, k, self._rnn_state.shape[1]), np.float32),
                "prev_action_in": np.zeros((e, k, *self._prev_action.shape[1:]), self._prev_action.dtype),
                "prev_reward_in": np.zeros((e, k), np.float32)}

    def _note_sequence_start(self, starts: dict[str, np.ndarray], t: int) -> None:
        """Step `t` of the fragment starts a sequence: what every sub-env's LSTM reads now."""
        k = t // self._seq_len
        starts["state_in"][:, k] = self._rnn_state
        starts["prev_action_in"][:, k] = self._prev_action
        starts["prev_reward_in"][:, k] = self._prev_reward

    def _act_recurrent(self, fobs: np.ndarray, explore: bool, actions: np.ndarray | None = None,
                       logp: np.ndarray | None = None, values: np.ndarray | None = None) -> np.ndarray:
        """One step of the recurrent policy for every sub-env (the states advance); the
        actions (written into `actions`, `logp`, `values` when given)."""
        a, lp, v, self._rnn_state = self.policy.act_step(fobs, self._rnn_state, self._prev_action,
                                                         self._prev_reward, explore)
        if actions is None:
            return a
        actions[...], logp[...], values[...] = a, lp, v
        return actions

    def _forget_states(self, rows: Any) -> None:
        """Sub-envs `rows` start new episodes: the initial state, previous action and reward zeroed."""
        rows = list(rows)
        self._rnn_state[rows] = self._rnn_state_at_start
        self._prev_action[rows] = 0
        self._prev_reward[rows] = 0.0

    # ------------------------------------------------------------------ build, reset, restart, close

    def _env_seed(self, i: int) -> int | None:
        """Seed for the first reset of sub-env i's current instance (later resets: None,
        so episodes differ)."""
        if self._seed is None or self._seeded[i]:
            return None
        self._seeded[i] = True
        return self._seed + i + 1_000 * self._restarts_of[i]

    def _build_and_check_envs(self, space_spec: dict | None) -> SpaceSpec:
        """Build the sub-envs into `self._envs`; their common spaces, checked against
        `space_spec`."""
        try:
            self._envs = self._build_envs()
        except SubEnvError as e:
            raise ConfigError(f"cannot create environment {self.env_id!r}: {e}") from e
        spec = self._envs[0].spec
        #: the real games of Atari sub-envs in this process (a sub-env process keeps its own)
        self._games = GameScores() if atari_id(self.env_id) and not self.remote_envs else None
        if any(env.spec != spec for env in self._envs[1:]):
            raise ConfigError(f"sub-envs of {self.env_id!r} have different spaces")
        if space_spec is not None and SpaceSpec.from_dict(space_spec) != spec:
            raise ConfigError(
                f"env runner {self.worker_index} sees spaces {spec} but the driver expects "
                f"{SpaceSpec.from_dict(space_spec)}"
            )
        return spec

    def _build_envs(self) -> list[Any]:
        """A new list of every sub-env, built under the watchdog: each one built is
        progress, so a constructor that hangs ends the process. If one fails, those
        already built are closed and the error propagates."""
        wd = self._watchdog
        wd.begin("env construction")
        envs: list[Any] = []
        try:
            for i in range(self.num_envs):
                envs.append(self._create(i))
                wd.stamp = time.monotonic()
        except BaseException:
            for env in envs:
                try:
                    env.close()
                except Exception:
                    pass
            raise
        finally:
            wd.end()
        return envs

    def _new_episode(self, i: int) -> None:
        self._ep_ids[i] = self.worker_index * _EPISODE_ID_STRIDE + self._next_episode
        self._next_episode += 1
        self._ep_ret[i] = 0.0
        self._ep_start[i] = self._vec_steps
        if self._episode_hooks is not None:  # (an episode still open there was cut)
            self._episode_hooks.start(i, self._ep_ids[i])
        if i == 0 and self._recorder is not None:  # an evaluation records sub-env 0's next episode
            self._recorder.episode_started()

    def _fit_obs(self, out: np.ndarray, i: int, obs: Any, what: str) -> None:
        """Write `obs` into out[i] through the encoder, whose reshape refuses an observation
        of the wrong size (a plain row assignment would broadcast a 1-element one, so the
        step loops' fast paths take only rows of the right length): a ConfigError (a
        ValueError) naming the sub-env and the space. A structured observation that does
        not fit (a missing key, a wrong shape, an action mask allowing nothing) is that
        sub-env's failure instead: noted for `_take_misfits`, its row zeroed."""
        try:
            self.encoder.write(out, i, obs)
        except (ValueError, TypeError) as e:
            if self.spec.obs_kind == "struct":
                out[i] = 0.0
                self._obs_misfits[i] = f"{what} returned an observation that does not fit the observation space: {e}"
                return
            raise ConfigError(f"sub-env {i}: {what} returned an observation that does not fit the "
                              f"observation space (shape {self.spec.obs_shape}): {e}") from e

    def _write_obs(self, out: np.ndarray, i: int, obs: Any) -> None:
        """A reset's observation into out[i]: a plain row assignment when it is a row of the
        right length (never a broadcast, as in the step loops), else through the encoder;
        SubEnvError if it holds NaN or inf."""
        direct = False
        if self._row_obs:
            try:
                direct = len(obs) == self._obs_dim
                if direct:
                    out[i] = obs
            except (ValueError, TypeError):  # a scalar, a ragged or wrong-shaped object
                direct = False
        if not direct:
            self._fit_obs(out, i, obs, "reset")
            if i in self._obs_misfits:
                raise SubEnvError(i, self._obs_misfits.pop(i))
        row = out[i]
        if not math.isfinite(sq_sum(row, row)) and not np.isfinite(row).all():
            raise SubEnvError(i, "observation contains NaN or inf")

    def _reset_env(self, i: int, out: np.ndarray) -> None:
        """Reset sub-env i into out[i], recreating it if it fails and restarts are on."""
        self._watchdog.stamp = time.monotonic()  # each (remote: bounded) reset is progress
        try:
            seed = None if self._seeded[i] else self._env_seed(i)
            self._write_obs(out, i, self._envs[i].reset(seed=seed))
        except SubEnvError as e:
            self._reset_failed(i, out, e)
        self._new_episode(i)

    def _reset_failed(self, i: int, out: np.ndarray, error: SubEnvError) -> None:
        """Sub-env i's reset failed: recreate it (restarts on) or mark it broken and raise."""
        if not self.restart_sub_envs:
            self._broken.add(i)
            raise error
        self._restart_env(i, out, error)

    def _log_failure(self, i: int, cause: BaseException) -> None:
        """A sub-env failed and is restarted: a warning naming why, at most
        `FAILURES_LOGGED_PER_MINUTE` a minute (the rest are counted)."""
        now = time.monotonic()
        minute, logged = self._failures_logged
        if now - minute >= 60.0:
            minute, logged = now, 0
        self._failures_logged = (minute, logged + 1)
        if logged < FAILURES_LOGGED_PER_MINUTE:
            log.warning("env runner %d: %s; restarting it (%d sub-env restarts so far)",
                        self.worker_index, cause, self.num_sub_env_restarts)

    def _restart_env(self, i: int, out: np.ndarray, cause: SubEnvError) -> None:
        """Replace sub-env i with a fresh one and reset it into out[i]."""
        self._log_failure(i, cause)
        last: BaseException = cause
        for _ in range(self.max_restart_attempts):
            self._watchdog.stamp = time.monotonic()  # each attempt is bounded on its own
            self.num_sub_env_restarts += 1
            self._restarts_of[i] += 1
            try:
                self._envs[i].close()
            except Exception:
                pass
            try:
                self._envs[i] = self._create(i)
                self._write_obs(out, i, self._envs[i].reset(seed=self._env_seed(i)))
                return
            except (SubEnvError, ConfigError) as e:
                last = e
        self._broken.add(i)
        raise SubEnvError(
            i, f"could not be restarted after {self.max_restart_attempts} attempts: {last}"
        ) from last

    def _full_reset(self) -> None:
        """Rebuild broken sub-envs and start fresh episodes in all of them."""
        for i in sorted(self._broken):
            try:
                self._envs[i].close()
            except Exception:
                pass
            self._envs[i] = self._create(i)
            self._watchdog.stamp = time.monotonic()  # each env rebuilt is progress
        self._broken.clear()
        for i in range(self.num_envs):
            self._reset_env(i, self._obs)
        self._needs_reset = False

    def _close_envs(self) -> None:
        for env in self._envs:
            try:
                env.close()
            except Exception:
                pass

    # ------------------------------------------------------------------ stepping

    def _step_fns(self) -> list:
        """The gymnasium `step` of each in-process sub-env, called directly in the hot
        loop (exceptions are turned into SubEnvError there)."""
        return [env.env.step for env in self._envs] if not self.remote_envs else []

    def _reset_fns(self) -> list | None:
        """The gymnasium `reset` of each in-process sub-env, for the vector step's resets
        at episode ends (None for a sub-env still owed its seeded first reset, which
        `_reset_env` does; no list for sub-env processes, nor for structured observations,
        whose misfits `_reset_env` turns into failures)."""
        if self.remote_envs or self.spec.obs_kind == "struct":
            return None
        seeded = self._seeded if self._seed is not None else [True] * self.num_envs
        return [env.env.reset if seeded[i] else None for i, env in enumerate(self._envs)]

    def _step_remote(
        self,
        env_actions: list,
        nxt: np.ndarray,
        rew_l: list,
        term_l: list,
        trunc_l: list,
        failed: dict[int, SubEnvError],
        infos: list | None = None,
    ) -> None:
        """Start every child's step, then collect them (children step in parallel); each
        step's info into `infos` when given (then the children send them)."""
        envs = self._envs
        wd, now = self._watchdog, time.monotonic
        misfit: ConfigError | None = None
        for i, env in enumerate(envs):
            try:
                env.step_start(env_actions[i])
            except SubEnvError as err:
                failed[i] = err
        for i, env in enumerate(envs):
            rew_l[i] = 0.0
            term_l[i] = trunc_l[i] = False
            if i in failed:
                continue
            try:
                o, r, te, tr, info = env.step_finish()
            except SubEnvError as err:
                failed[i] = err
                continue
            finally:
                wd.stamp = now()  # each answer (or timeout) of a child is progress
            try:
                self._fit_obs(nxt, i, o, "step")
            except ConfigError as err:  # raised once every child's answer is read (in step)
                misfit = misfit or err
            rew_l[i] = r
            term_l[i] = te
            trunc_l[i] = tr
            if infos is not None:
                infos[i] = info
                if env.info_values_dropped:  # values the child could not send
                    self.info_values_dropped += env.info_values_dropped
                    env.info_values_dropped = 0
        if misfit is not None:
            raise misfit

    # ------------------------------------------------------------------ failures and episode ends

    def _take_misfits(self, failed: dict[int, SubEnvError]) -> None:
        """The sub-envs whose structured observation did not fit this step: failed."""
        for i, why in self._obs_misfits.items():
            failed.setdefault(i, SubEnvError(i, why))
        self._obs_misfits.clear()

    def _find_nan(self, nxt: np.ndarray, rew: list, failed: dict[int, SubEnvError]) -> None:
        for i in range(self.num_envs):
            if i in failed:
                continue
            if not math.isfinite(rew[i]):
                failed[i] = SubEnvError(i, "returned NaN or inf as its reward")
            elif not np.isfinite(nxt[i]).all():
                failed[i] = SubEnvError(i, "returned NaN or inf in its observation")

    def _handle_failures(
        self,
        failed: dict[int, SubEnvError],
        nxt: np.ndarray,
        rew: list,
        term: list,
        trunc: list,
    ) -> None:
        if not self.restart_sub_envs:
            self._broken.update(failed)
            self._needs_reset = True
            raise next(iter(failed.values()))
        for i, err in failed.items():
            rew[i] = 0.0
            term[i] = False
            trunc[i] = True
            self._ep_ret[i] = math.nan  # marks the episode as cut: never reported
            self._restart_env(i, nxt, err)

    def _end_episodes(
        self,
        idx: list[int],
        failed: dict[int, SubEnvError],
        nxt: np.ndarray,
        term: list,
        trunc: list,
        b_tval: np.ndarray | None,
        t: int,
        resets: list | None = None,
    ) -> None:
        """Finish the episodes of sub-envs `idx` at step `t` (bootstrap values of truncated
        ones into `b_tval[t]` when recording) and reset them into `nxt`, except those the
        vector step reset already (`resets`: (sub-env, outcome), see `vector_step`)."""
        if b_tval is not None and True in trunc:  # (only ended or failed sub-envs are flagged)
            boot = [i for i in idx if trunc[i] and not term[i] and i not in failed]
            if boot:
                finals = self.filter(nxt[boot], update=False)
                b_tval[t, boot] = self._values(finals, boot)
        vec_steps, ep_ret, ep_start = self._vec_steps, self._ep_ret, self._ep_start
        returns, lengths, reset = self._done_returns, self._done_lengths, self._reset_env
        hooks = self._episode_hooks
        done = dict(resets) if resets else _NO_RESETS
        for i in idx:
            if failed and i in failed:
                self._new_episode(i)
                continue
            returns.append(float(ep_ret[i]))
            lengths.append(vec_steps - ep_start[i])
            self.episodes_total += 1
            if self._games is not None:
                self._games.episode_recorded(self._envs[i].env)
            if hooks is not None:  # on_episode_end, before the next episode starts
                hooks.end(i)
            if i not in done:
                reset(i, nxt)
                continue
            outcome = done[i]
            if outcome is not None:  # as `_reset_env` would have failed
                self._reset_failed(i, nxt, reset_error(i, outcome) if outcome is not False
                                   else SubEnvError(i, "observation contains NaN or inf"))
            self._new_episode(i)

    def _take_episodes(self, first: int | None = None) -> dict[str, Any]:
        """The episodes finished since the last take (the `first` of them only, when
        given): returns, lengths and, when the callbacks logged any, "custom" ({name: a
        value per episode, NaN: not logged})."""
        out: dict[str, Any] = {
            "returns": np.asarray(self._done_returns, np.float64),
            "lengths": np.asarray(self._done_lengths, np.int64),
        }
        self._done_returns = []
        self._done_lengths = []
        custom = self._episode_hooks.take() if self._episode_hooks is not None else {}
        if self._games is not None:
            custom = {**custom, **self._games.take()}
        if custom:
            out["custom"] = {name: np.asarray(v, np.float64) for name, v in custom.items()}
        if first is not None:
            out = {k: ({n: c[:first] for n, c in v.items()} if k == "custom" else v[:first]) for k, v in out.items()}
        return out
