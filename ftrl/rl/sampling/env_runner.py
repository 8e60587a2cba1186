"""EnvRunner: E sub-environments stepped as a vector with one batched policy call per step.

Inference runs on `ftrl.rl.models.policy` (numpy by default, so runner processes never import
torch; `inference_backend="torch"` uses the torch module instead). The loop over the
in-process sub-envs at each vector step, with the reset of each sub-env whose episode
terminated in it, runs in C (`ftrl/rl/_vecstep.c`, built by `pip install` where a C
compiler is found; ~6% more steps/s on CartPole) or, without it or with
`FTRL_PURE_PYTHON=1`, in Python: the same calls, fragments and errors.

Created as an actor (`"ftrl.rl.sampling.env_runner:EnvRunner"`) or in-process. Constructor
kwargs and every method's arguments and results are msgpack + numpy only.

Reset semantics (no gymnasium next-step autoreset): when a sub-env's episode ends at
step t (terminated or truncated), the runner resets it at once, in the same step, so
row t+1 holds the first observation of the next episode. The final observation is
never stored as a row; for a time-limit truncation the runner computes V(final_obs)
and stores it in `trunc_values[t]` so GAE bootstraps from it. Episodes span fragments:
a sub-env mid-episode at the end of a fragment just continues in the next one, and
`last_values` bootstraps the cut.

Sub-env failure (an exception in reset/step, NaN/inf in its observation or reward, or
its process dying when `remote_worker_envs=True`):
- with `restart_failed_sub_environments=True` only that sub-env is recreated; its
  episode is cut (marked truncated, never counted as a finished episode), the step it
  failed in is marked `valid=False` (the learner drops it), the others go on, and
  `num_sub_env_restarts` counts it;
- otherwise the error propagates out of `sample()`; the next call rebuilds the envs
  that failed and starts fresh episodes everywhere.
A remote sub-env that does not answer within `sample_timeout_s` counts as hung (failed).

Hung env (in-process sub-envs): a runner inside an actor process (a remote runner, or
the local runner of a job's driver actor) runs a `ProgressWatchdog` (ftrl.util.watchdog).
While `sample()`/`evaluate()` runs, each vector step stamps progress; if no step
completes for `env_step_timeout_s` the watchdog logs
`event=WATCHDOG_KILL ... reason="env step hung for X s ..."` and ends the process with
exit code `EXIT_WATCHDOG`, so the worker restarts it like any failed actor and the
driver's runner group recovers it (a driver that sampled itself restarts in place and
resumes from its newest checkpoint). Building the sub-envs (in the constructor and in
`reset_envs()`, a soft restart) is watched the same way: each sub-env built is progress,
and one whose construction takes longer than `env_step_timeout_s` ends the process
("env construction hung ..."), where a hung soft restart would otherwise hold the
runner's lock for good. A Python-level spin in `step` is caught (the watchdog
thread still gets the GIL); a C extension spinning while holding the GIL is not. With
`remote_worker_envs=True` the per-sub-env timeout above handles hung sub-envs first: the
watchdog then waits at least `2 * sample_timeout_s + 10` s.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from typing import Any

import numpy as np

from ftrl.config import AlgorithmConfig
from ftrl.config.registry import config_from_dict
from ftrl.rl.models.policy import make_policy
from ftrl.rl.sampling.filters import NoFilter, make_filter
from ftrl.rl.sampling.sub_env import SubEnvError, make_sub_env, reset_error
from ftrl.rl.spaces import ObsEncoder, SpaceSpec, env_action
from ftrl.util.watchdog import ProgressWatchdog
from ftrl.wire.errors import ConfigError

log = logging.getLogger(__name__)

_EPISODE_ID_STRIDE = 1 << 40
_NO_RESETS: dict[int, Any] = {}
#: x.x of an observation row or batch: NaN/inf (or a huge value) makes it non-finite; the
#: cheapest check for the hot loop (a non-finite result goes to the exact per-env check)
_sq_sum = np.vdot


def _native_step() -> Any:
    """`ftrl.rl.sampling._vecstep.step_envs`, the vector step in C (built by `pip install` where a C
    compiler is found), or None: the pure-Python loop in `_steps`, which does the same.
    `FTRL_PURE_PYTHON=1` picks the Python loop."""
    if os.environ.get("FTRL_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from ftrl.rl.sampling._vecstep import step_envs
    except ImportError:
        return None
    return step_envs


#: the vector step over in-process sub-envs in C, or None (see `_native_step`)
_step_envs = _native_step()



class EnvRunner:
    """Samples fixed-length time-major fragments from E sub-envs with the current policy.

    Args:
        config: `AlgorithmConfig.to_dict()` (or the config itself in-process).
        worker_index: 0 for the Algorithm's local runner, 1..N for remote ones.
        evaluation: apply `evaluation_config` overrides (explore, env_config).
        space_spec: the spaces the driver expects (`SpaceSpec.to_dict()`); checked.
        set_torch_threads: with the torch inference backend, call torch.set_num_threads(1)
            (actors: yes). The numpy backend (default) never imports torch.
        watchdog: kill this process when an env step hangs for `env_step_timeout_s`
            (see the module docstring). None (default): on inside an actor process (a
            remote runner, or a driver actor's local runner), off in a user's own process.
    """

    def __init__(
        self,
        config: dict | AlgorithmConfig,
        worker_index: int = 0,
        evaluation: bool = False,
        space_spec: dict | None = None,
        set_torch_threads: bool = True,
        watchdog: bool | None = None,
    ):
        cfg = config_from_dict(config)
        if set_torch_threads and cfg.env_runners_cfg.inference_backend == "torch":
            import torch

            torch.set_num_threads(1)
        self.config = cfg
        self.worker_index = int(worker_index)
        self.evaluation = evaluation
        run = cfg.env_runners_cfg
        ft = cfg.fault_tolerance_cfg
        self.num_envs = run.num_envs_per_env_runner
        self.fragment_length = cfg.get_rollout_fragment_length()
        self.env_id = cfg.environment_cfg.env
        self.env_config = dict(cfg.environment_cfg.env_config)
        self.explore = run.explore
        if evaluation:
            overrides = cfg.evaluation_cfg.evaluation_config
            self.explore = bool(overrides.get("explore", False))
            self.env_config.update(overrides.get("env_config", {}))
        self.remote_envs = run.remote_worker_envs
        self.restart_sub_envs = ft.restart_failed_sub_environments
        self.max_restart_attempts = ft.max_num_sub_env_restart_attempts
        self.sub_env_timeout_s = max(run.sample_timeout_s, 1.0)
        seed = cfg.debugging_cfg.seed
        # distinct seeds per runner, and evaluation runners apart from training ones
        self._seed = None if seed is None else seed + 10_007 * self.worker_index + (500_009 if evaluation else 0)
        self._lock = threading.RLock()
        self._weights_plane: Any = None  # WeightsNode, started on first use
        self._sample_server: Any = None  # SampleServer, started on first sample_address()
        self._plane_lock = threading.Lock()

        self._watchdog: ProgressWatchdog | _Unwatched = _UNWATCHED
        if watchdog is None:
            from ftrl.client.context import get_runtime_context

            watchdog = get_runtime_context() is not None
        if watchdog:
            ctx_name = _own_name(f"env runner {self.worker_index}")
            timeout = run.env_step_timeout_s
            if self.remote_envs:  # hung sub-env processes are handled per step first
                timeout = max(timeout, 2 * self.sub_env_timeout_s + 10.0)
            self._watchdog = ProgressWatchdog(timeout, what="env step", name=ctx_name)

        self._envs: list[Any] = []
        self._seeded = [False] * self.num_envs
        self._restarts_of = [0] * self.num_envs
        try:
            self.spec: SpaceSpec = self._build_and_check_envs(space_spec)
            self.encoder = ObsEncoder(self.spec)
            # a 1-D Box observation: rows of the right length are assigned directly
            self._row_obs = self.encoder.kind != "discrete" and len(self.spec.obs_shape) == 1
            self._obs_dim = self.spec.obs_dim
            self.policy = make_policy(run.inference_backend, self.spec, cfg.model_config, self._seed)
            self.filter = make_filter(run.observation_filter, (self.spec.obs_dim,))
        except BaseException:  # nothing left running: envs (and their processes), the watchdog
            self._close_envs()
            self._watchdog.close()
            raise
        self.weights_version = -1
        self._synced_filter: dict[str, Any] | None = None  # what the driver sent last (synced_filter)

        e, d = self.num_envs, self.spec.obs_dim
        self._obs = np.zeros((e, d), np.float32)
        self._next_obs = np.zeros((e, d), np.float32)
        self._ep_ids = np.zeros(e, np.int64)
        self._ep_ret = [0.0] * e  # running return of each sub-env's episode (a list: hot loop)
        self._ep_start = [0] * e  # vector step at which each episode began (a list: hot loop)
        self._vec_steps = 0
        self._next_episode = 0
        self._done_returns: list[float] = []
        self._done_lengths: list[int] = []
        self._needs_reset = True
        self._broken: set[int] = set()
        # counters
        self.num_sub_env_restarts = 0
        self.env_steps_total = 0
        self.episodes_total = 0
        self.num_samples = 0
        log.info("env runner %d: %d sub-env%s of %s, step loop: %s", self.worker_index, self.num_envs,
                 "" if self.num_envs == 1 else "s", self.env_id, self.step_loop)

    # ------------------------------------------------------------------ env lifecycle

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

    def _create(self, i: int) -> Any:
        env = make_sub_env(i, self.env_id, self.env_config, self.remote_envs, self.sub_env_timeout_s)
        if i < len(self._seeded):
            self._seeded[i] = False
        return env

    def _new_episode(self, i: int) -> None:
        self._ep_ids[i] = self.worker_index * _EPISODE_ID_STRIDE + self._next_episode
        self._next_episode += 1
        self._ep_ret[i] = 0.0
        self._ep_start[i] = self._vec_steps

    def _fit_obs(self, out: np.ndarray, i: int, obs: Any, what: str) -> None:
        """Write `obs` into out[i] through the encoder, whose reshape refuses an observation
        of the wrong size (a plain row assignment would broadcast a 1-element one, so the
        step loops' fast paths take only rows of the right length): a ConfigError (a
        ValueError) naming the sub-env and the space."""
        try:
            self.encoder.write(out, i, obs)
        except (ValueError, TypeError) as e:
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
        row = out[i]
        if not math.isfinite(_sq_sum(row, row)) and not np.isfinite(row).all():
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

    def _restart_env(self, i: int, out: np.ndarray, cause: SubEnvError) -> None:
        """Replace sub-env i with a fresh one and reset it into out[i]."""
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

    # ------------------------------------------------------------------ sampling

    def _values(self, fobs: np.ndarray) -> np.ndarray:
        return self.policy.value(fobs)

    def _run(self, steps: int, explore: bool, record: bool, max_episodes: int | None = None) -> dict[str, np.ndarray] | None:
        """`_steps` with the hung-env watchdog armed while it runs."""
        wd = self._watchdog
        wd.begin("env step")
        try:
            return self._steps(steps, explore, record, max_episodes, wd)
        finally:
            wd.end()

    def _steps(self, steps: int, explore: bool, record: bool, max_episodes: int | None,
               wd: ProgressWatchdog | _Unwatched) -> dict[str, np.ndarray] | None:
        """Step all sub-envs `steps` times; return a time-major fragment if `record`.

        The hot loop writes each step's policy outputs into the fragment's preallocated
        arrays (`act_into`: measured faster than keeping every step's small arrays alive
        until the end, or copying them in) and keeps rewards in plain lists converted once
        at the end. Without an observation filter the envs write each next observation
        straight into the fragment's next row (no copy per step; the last step writes into
        `_next_obs`, which the next fragment starts from). Episode ends are rare, so done
        flags are written only at the steps that have one, for the sub-envs the env loop
        saw end; it also adds up episode returns (no second pass over the envs). The first
        vector step of a fragment, and the one after a sub-env restart, write observations
        through the encoder, which refuses a wrong shape; later steps assign rows directly.
        The loop over the sub-envs runs in C when it is built (`_step_envs`); the Python
        loop beside it is the reference and does the same. The C step also resets each
        sub-env whose episode terminated cleanly (the common episode end, ~46 per CartPole
        fragment: a reset through Python's calls cost as much again as the step), and
        `_end_episodes` then only records the episode; truncations (bootstrapped from the
        final observation), a sub-env owed its seeded first reset and failures go the
        Python way. A reset is part of its vector step for the hung-env watchdog.
        """
        if self._needs_reset or self._broken:
            self._full_reset()
        e, d = self.num_envs, self.spec.obs_dim
        b_obs = np.empty((steps, e, d), np.float32) if record else None
        b_tval = np.zeros((steps, e), np.float32) if record else None
        b_valid = np.ones((steps, e), bool) if record else None
        b_epid = np.empty((steps, e), np.int64) if record else None
        b_term = np.zeros((steps, e), bool) if record else None
        b_trunc = np.zeros((steps, e), bool) if record else None
        act_shape = (steps, e) if self.spec.act_kind == "discrete" else (steps, e, self.spec.act_dim)
        b_act = np.empty(act_shape, self.spec.action_dtype) if record else None
        b_logp = np.empty((steps, e), np.float32) if record else None
        b_val = np.empty((steps, e), np.float32) if record else None
        rew_rows: list[list[float]] = []
        filt = self.filter
        update_filter = record
        # without a filter the envs write each next observation straight into the fragment
        direct = record and max_episodes is None and type(filt) is NoFilter
        if direct:
            b_obs[0] = self._obs
        spec = self.spec
        discrete = spec.act_kind == "discrete"
        box_obs = self.encoder.kind != "discrete" and len(spec.obs_shape) == 1
        fast = False  # the first step writes through the encoder (checked shapes)
        fit = self._fit_obs
        remote = self.remote_envs
        step_fns = self._step_fns()
        native = _step_envs
        reset_fns = self._reset_fns() if native is not None else None
        resets: list = []  # the C step's resets at episode ends: (sub-env, outcome)
        restarts_seen = self.num_sub_env_restarts
        ep_ret = self._ep_ret
        ep_ids = self._ep_ids
        act, act_into = self.policy.act, self.policy.act_into
        now = time.monotonic
        isfinite = math.isfinite
        sq_sum = _sq_sum
        envs = range(e)
        t = -1
        last = steps - 1
        try:
            for t in range(steps):
                wd.stamp = now()  # progress for the hung-env watchdog: one store per vector step
                if direct:
                    obs = fobs = b_obs[t]
                    nxt = b_obs[t + 1] if t < last else self._next_obs
                else:
                    obs = self._obs
                    fobs = filt(obs, update=update_filter)
                    nxt = self._next_obs
                # one batched forward for all sub-envs
                if record:
                    a_t = b_act[t]
                    act_into(fobs, explore, a_t, b_logp[t], b_val[t])
                    if not direct:
                        b_obs[t] = fobs
                    b_epid[t] = ep_ids
                else:
                    a_t = act(fobs, explore)[0]
                env_actions = a_t.tolist() if discrete else env_action(spec, a_t)
                rew_l = [0.0] * e
                term_l = [False] * e
                trunc_l = [False] * e
                failed: dict[int, SubEnvError] = {}
                ended: list[int] = []  # sub-envs whose episode ended at this step, in order
                if remote:
                    self._step_remote(env_actions, nxt, rew_l, term_l, trunc_l, failed)
                    for i in envs:
                        ep_ret[i] += rew_l[i]
                    ended = [i for i in envs if term_l[i] or trunc_l[i]]
                elif native is not None:  # the loop below, in C (ftrl/rl/_vecstep.c)
                    ended, raised, finite, resets = native(step_fns, env_actions, nxt, rew_l, term_l,
                                                           trunc_l, ep_ret, fit, fast, reset_fns)
                    for i, exc in raised:
                        failed[i] = SubEnvError(i, f"step raised {type(exc).__name__}: {exc}")
                        failed[i].__cause__ = exc
                else:
                    for i in envs:
                        try:
                            o, r, te, tr, _ = step_fns[i](env_actions[i])
                        except Exception as exc:
                            failed[i] = SubEnvError(i, f"step raised {type(exc).__name__}: {exc}")
                            failed[i].__cause__ = exc
                            continue
                        if fast:  # a plain row assignment, but never a broadcast (as the C step)
                            try:
                                direct_row = len(o) == d
                                if direct_row:
                                    nxt[i] = o
                            except (ValueError, TypeError):  # a scalar, a wrong shape
                                direct_row = False
                            if not direct_row:  # the encoder's error names the sub-env
                                fit(nxt, i, o, "step")
                        else:
                            fit(nxt, i, o, "step")
                        rew_l[i] = r
                        ep_ret[i] += r  # a failed sub-env's return is set to NaN below
                        if te or tr:
                            if te:
                                term_l[i] = True
                            if tr:
                                trunc_l[i] = True
                            ended.append(i)
                if remote or native is None:  # (the C step checks as it copies)
                    # one reduction each; a non-finite sum sends us to the exact check
                    finite = isfinite(sum(rew_l)) and isfinite(sq_sum(nxt, nxt))
                if not finite:
                    self._find_nan(nxt, rew_l, failed)
                fast = box_obs
                if failed:
                    self._handle_failures(failed, nxt, rew_l, term_l, trunc_l)
                    step_fns = self._step_fns()
                    reset_fns = self._reset_fns() if native is not None else None
                    restarts_seen = self.num_sub_env_restarts
                    fast = False
                    if record:
                        for i in failed:
                            b_valid[t, i] = False
                    ended = [i for i in envs if term_l[i] or trunc_l[i]]  # failed ones are truncated
                self._vec_steps += 1
                if record:
                    rew_rows.append(rew_l)
                if ended:
                    if record:
                        b_term[t] = term_l
                        b_trunc[t] = trunc_l
                    self._end_episodes(ended, failed, nxt, term_l, trunc_l, b_tval, t, resets)
                    if self.num_sub_env_restarts != restarts_seen:  # a reset failed: env replaced
                        step_fns = self._step_fns()
                        reset_fns = self._reset_fns() if native is not None else None
                        restarts_seen = self.num_sub_env_restarts
                        fast = False
                if not direct:
                    self._obs, self._next_obs = nxt, obs
                if max_episodes is not None and len(self._done_returns) >= max_episodes:
                    break
        except BaseException:
            if direct and t >= 0:  # where the envs are: they last acted on step t's observation
                self._obs[...] = b_obs[t]
            raise
        steps_done = t + 1
        if direct:  # the last step wrote into _next_obs: it becomes the current observation
            self._obs, self._next_obs = self._next_obs, self._obs
        self.env_steps_total += steps_done * e
        if not record:
            return None
        return {
            "obs": b_obs,
            "actions": b_act,
            "rewards": np.array(rew_rows, np.float32).reshape(steps, e),
            "terminateds": b_term,
            "truncateds": b_trunc,
            "logp": b_logp,
            "values": b_val,
            "trunc_values": b_tval,
            "valid": b_valid,
            "episode_ids": b_epid,
            "last_values": self._values(filt(self._obs, update=False)).astype(np.float32),
        }

    def _step_fns(self) -> list:
        """The gymnasium `step` of each in-process sub-env, called directly in the hot
        loop (exceptions are turned into SubEnvError there)."""
        return [env.env.step for env in self._envs] if not self.remote_envs else []

    def _reset_fns(self) -> list | None:
        """The gymnasium `reset` of each in-process sub-env, for the C step's resets at
        episode ends (None for a sub-env still owed its seeded first reset, which
        `_reset_env` does; no list for sub-env processes)."""
        if self.remote_envs:
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
    ) -> None:
        """Start every child's step, then collect them (children step in parallel)."""
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
                o, r, te, tr = env.step_finish()
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
        if misfit is not None:
            raise misfit

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
        ones into `b_tval[t]` when recording) and reset them into `nxt`, except those the C
        step reset already (`resets`: (sub-env, outcome), see ftrl/rl/_vecstep.c)."""
        if b_tval is not None and True in trunc:  # (only ended or failed sub-envs are flagged)
            boot = [i for i in idx if trunc[i] and not term[i] and i not in failed]
            if boot:
                finals = self.filter(nxt[boot], update=False)
                b_tval[t, boot] = self._values(finals)
        vec_steps, ep_ret, ep_start = self._vec_steps, self._ep_ret, self._ep_start
        returns, lengths, reset = self._done_returns, self._done_lengths, self._reset_env
        done = dict(resets) if resets else _NO_RESETS
        for i in idx:
            if failed and i in failed:
                self._new_episode(i)
                continue
            returns.append(float(ep_ret[i]))
            lengths.append(vec_steps - ep_start[i])
            self.episodes_total += 1
            if i not in done:
                reset(i, nxt)
                continue
            outcome = done[i]
            if outcome is not None:  # as `_reset_env` would have failed
                self._reset_failed(i, nxt, reset_error(i, outcome) if outcome is not False
                                   else SubEnvError(i, "observation contains NaN or inf"))
            self._new_episode(i)

    def _take_episodes(self) -> dict[str, np.ndarray]:
        out = {
            "returns": np.asarray(self._done_returns, np.float64),
            "lengths": np.asarray(self._done_lengths, np.int64),
        }
        self._done_returns = []
        self._done_lengths = []
        return out

    # ------------------------------------------------------------------ public API

    def __ftrl_drain__(self) -> str:
        """The node drains (pre-emption, scancel, systemctl stop): calls run one at a
        time, so this returns once the sample in flight has been answered, and the
        driver's iteration can finish (and checkpoint) instead of losing the fragment.
        A sample on the sample channel is waited for too (up to the sample timeout)."""
        server = self._sample_server
        if server is not None and not server.wait_idle(max(self.config.env_runners_cfg.sample_timeout_s, 1.0)):
            return "the sample in flight on the sample channel was not answered in time"
        return "the sample in flight was answered"

    def sample(self, explore: bool | None = None) -> dict[str, Any]:
        """Step every sub-env `rollout_fragment_length` times.

        Returns {"batch": fragment (see ftrl.rl.sample_batch), "episodes": {"returns",
        "lengths"} of episodes finished during this call, "env_steps": T*E,
        "weights_version", "filter_delta", "num_sub_env_restarts" (cumulative),
        "sub_env_restarts" (during this call), "worker_index", "sample_time_s"}.
        """
        with self._lock:
            t0 = time.perf_counter()
            restarts_before = self.num_sub_env_restarts
            try:
                batch = self._run(self.fragment_length, self.explore if explore is None else explore, record=True)
            except SubEnvError:
                self._take_episodes()
                raise
            self.num_samples += 1
            assert batch is not None
            return {
                "batch": batch,
                "episodes": self._take_episodes(),
                "env_steps": self.fragment_length * self.num_envs,
                "weights_version": self.weights_version,
                "filter_delta": self.filter.get_delta(flush=True),
                "num_sub_env_restarts": self.num_sub_env_restarts,
                "sub_env_restarts": self.num_sub_env_restarts - restarts_before,
                "worker_index": self.worker_index,
                "sample_time_s": time.perf_counter() - t0,
            }

    def evaluate(
        self,
        num_episodes: int | None = None,
        num_timesteps: int | None = None,
        explore: bool | None = None,
        max_env_steps: int = 1_000_000,
    ) -> dict[str, Any]:
        """Run fresh episodes (all sub-envs reset first) without learning or filter updates.

        Stops after `num_episodes` finished episodes (or `max_env_steps`, so an env that
        never ends cannot hang it) or `num_timesteps` env steps (rounded up to whole
        vector steps). Returns {"returns", "lengths", "env_steps"}.
        """
        if (num_episodes is None) == (num_timesteps is None):
            raise ValueError("evaluate() needs exactly one of num_episodes or num_timesteps")
        with self._lock:
            self._take_episodes()
            self._needs_reset = True
            explore = self.explore if explore is None else explore
            steps_before = self.env_steps_total
            if num_timesteps is not None:
                self._run(max(1, math.ceil(num_timesteps / self.num_envs)), explore, record=False)
            else:
                while len(self._done_returns) < num_episodes and self.env_steps_total - steps_before < max_env_steps:
                    self._run(1000, explore, record=False, max_episodes=num_episodes)
            episodes = self._take_episodes()
            if num_episodes is not None:
                episodes = {k: v[:num_episodes] for k, v in episodes.items()}
            self._needs_reset = True
            return {**episodes, "env_steps": self.env_steps_total - steps_before}

    def set_weights(self, version: int, weights: np.ndarray, filter_state: dict | None = None) -> dict[str, Any]:
        """Load policy weights (flat float32) tagged `version`, and optionally filter state."""
        with self._lock:
            self.policy.set_flat(weights)
            self.weights_version = int(version)
            if filter_state is not None:
                self.filter.set_state(filter_state)
                self._synced_filter = filter_state
            return {"weights_version": self.weights_version}

    def synced_filter(self) -> dict[str, Any]:
        """The weights version and the observation filter state the driver sent with it
        last (None before any): the central filter, for a driver that lost its own."""
        with self._lock:
            return {"weights_version": self.weights_version, "filter": self._synced_filter}

    def weights_address(self) -> str:
        """host:port of this runner's server on the weights plane (started on first use),
        from which its children in the broadcast tree pull."""
        return self._weights_node().address

    def sample_address(self) -> dict[str, Any]:
        """{"address": host:port, "incarnation": n} of this runner's sample channel server
        (`ftrl.rl.sampling.sample_plane`, started on first use); address "" where there is none
        (in-process; a TLS cluster, as the channel is plain TCP; no cluster token on a
        non-loopback address)."""
        from ftrl.client.context import get_runtime_context
        from ftrl.wire.security import is_loopback

        ctx = get_runtime_context()
        if ctx is None or ctx.security is None or ctx.security.tls:
            return {"address": "", "incarnation": 0}
        if not ctx.security.token and not is_loopback(ctx.host):
            return {"address": "", "incarnation": 0}  # no token off loopback: nothing to check peers with
        with self._plane_lock:
            if self._sample_server is None:
                from ftrl.rl.sampling.sample_plane import SampleServer

                self._sample_server = SampleServer(self, ctx.host, ctx.security.token, ctx.incarnation,
                                                   self.config.env_runners_cfg.sample_busy_poll_s)
            return {"address": self._sample_server.address, "incarnation": ctx.incarnation}

    def pull_weights(self, version: int, key: int, source: str, nbytes: int, filter_state: dict | None = None,
                     timeout_s: float = 60.0) -> dict[str, Any]:
        """Pull weights `version` (`nbytes` of float32, published as blob `key`) from the
        weights plane server at `source` (the driver or this runner's parent), serving
        them onward while they arrive, then load them like `set_weights`."""
        from ftrl.rl.weights.plane import fetch

        node = self._weights_node()
        flat = fetch(source, node.token, int(key), node.store, int(nbytes), float(timeout_s))
        return self.set_weights(version, flat, filter_state)

    def _weights_node(self) -> Any:
        with self._plane_lock:
            if self._weights_plane is None:
                from ftrl.client.context import get_runtime_context
                from ftrl.rl.weights.plane import WeightsNode

                ctx = get_runtime_context()
                self._weights_plane = WeightsNode(ctx.host if ctx else "127.0.0.1",
                                                  ctx.security.token if ctx else None)
            return self._weights_plane

    def set_weights_tree(
        self,
        version: int,
        weights: np.ndarray,
        filter_state: dict | None = None,
        children: list | None = None,
        hop_timeout_s: float = 30.0,
    ) -> dict[str, dict[str, Any]]:
        """`set_weights` here, then forward the same weights down a broadcast tree.

        `children` are subtrees `[name, incarnation, [subtrees...]]` (see
        `ftrl.rl.sampling.runner_group.build_weights_tree`). Returns {runner name: {"weights_version": v}
        or {"error": "..."}} for this runner and its whole subtree."""
        return relay_weights(self, version, weights, filter_state, children, hop_timeout_s)

    def get_weights(self) -> tuple[int, np.ndarray]:
        with self._lock:
            return self.weights_version, self.policy.get_flat()

    def get_filter_state(self) -> dict[str, Any]:
        with self._lock:
            return self.filter.get_state()

    def set_filter_state(self, state: dict[str, Any]) -> None:
        with self._lock:
            self.filter.set_state(state)

    def get_spec(self) -> dict[str, Any]:
        """The spaces this runner's envs have (SpaceSpec.to_dict())."""
        return self.spec.to_dict()

    def reset_envs(self) -> dict[str, Any]:
        """Recreate every sub-env and start fresh episodes (a soft restart of the runner)."""
        with self._lock:
            self._close_envs()
            try:
                self._envs = self._build_envs()
            except BaseException:
                # the old (closed) envs stay in place, all marked broken: the next sample
                # rebuilds every one of them first
                self._broken = set(range(self.num_envs))
                self._needs_reset = True
                raise
            self._broken.clear()
            self._take_episodes()
            self._needs_reset = True
            return self.ping()

    def ping(self) -> dict[str, Any]:
        """Health probe: cheap, takes no lock. Reports dead sub-env processes."""
        dead = 0
        for env in list(self._envs):
            proc = getattr(env, "_proc", None)
            if proc is not None and proc.poll() is not None:
                dead += 1
        return {
            "ok": True,
            "worker_index": self.worker_index,
            "pid": os.getpid(),
            "weights_version": self.weights_version,
            "num_dead_sub_envs": dead,
            "time": time.time(),
        }

    @property
    def step_loop(self) -> str:
        """What steps the sub-envs: "c" (ftrl/rl/_vecstep.c), "python" (not built, or
        `FTRL_PURE_PYTHON=1`) or "sub-env processes" (`remote_worker_envs`)."""
        if self.remote_envs:
            return "sub-env processes"
        return "python" if _step_envs is None else "c"

    def get_metrics(self) -> dict[str, Any]:
        """Cumulative counters of this runner, and which loop steps its sub-envs."""
        return {
            "worker_index": self.worker_index,
            "step_loop": self.step_loop,
            "num_sub_env_restarts": self.num_sub_env_restarts,
            "env_steps_total": self.env_steps_total,
            "episodes_total": self.episodes_total,
            "num_samples": self.num_samples,
            "weights_version": self.weights_version,
        }

    def stop(self) -> None:
        """Close every sub-env (and its process), the watchdog and the weights plane server."""
        self._watchdog.close()
        with self._lock:
            self._close_envs()
        if self._weights_plane is not None:
            self._weights_plane.close()
        if self._sample_server is not None:
            self._sample_server.close()


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


# ---------------------------------------------------------------------- weight broadcast tree


def subtree_names(subtree: list) -> list[str]:
    """Every runner name in a subtree `[name, incarnation, [subtrees...]]`, root first."""
    out: list[str] = []
    stack = [subtree]
    while stack:
        name, _, children = stack.pop()
        out.append(str(name))
        stack.extend(reversed(children))
    return out


def subtree_height(subtree: list) -> int:
    """Hops from the root of `subtree` to its deepest runner, counting the root (>= 1)."""
    _, _, children = subtree
    return 1 + max((subtree_height(c) for c in children), default=0)


def _peer_client() -> Any:
    """The client this actor calls other actors with, or None (in-process runners)."""
    from ftrl.client.context import get_runtime_context

    ctx = get_runtime_context()
    if ctx is None or not ctx.coordinator:
        return None
    return ctx.client()


def _own_name(default: str = "self") -> str:
    from ftrl.client.context import get_runtime_context

    ctx = get_runtime_context()
    return ctx.name if ctx is not None else default


def _error_entry(error: BaseException | str, unreached: bool = False) -> dict[str, Any]:
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    entry: dict[str, Any] = {"error": text[:2000]}
    if unreached:
        entry["unreached"] = True
    return entry


class _PeerHandles:
    """Strict handles to the children of one relay, kept between broadcasts."""

    def __init__(self) -> None:
        self._handles: dict[str, Any] = {}

    def get(self, client: Any, name: str, incarnation: int) -> Any:
        """A strict handle to `name` that calls exactly `incarnation` (the one the driver
        synced); a different current incarnation is refused, never called."""
        from ftrl.wire.errors import StaleIncarnationError

        handle = self._handles.get(name)
        if handle is None or (incarnation and handle.incarnation != incarnation):
            try:
                handle = client.get_actor(name, strict=True)
            except TypeError:  # an in-process LocalClient: handles are always strict
                handle = client.get_actor(name)
            self._handles[name] = handle
        if incarnation and handle.incarnation != incarnation:
            self._handles.pop(name, None)
            raise StaleIncarnationError(
                f"{name} is at incarnation {handle.incarnation}, the broadcast was meant for "
                f"incarnation {incarnation} (it is resynced by its owner)")
        return handle

    def drop(self, name: str) -> None:
        self._handles.pop(name, None)


def relay_weights(
    runner: Any,
    version: int,
    weights: np.ndarray,
    filter_state: dict | None,
    children: list | None,
    hop_timeout_s: float,
) -> dict[str, dict[str, Any]]:
    """Apply weights on `runner` (its `set_weights`), then forward them to `children` in
    parallel and collect one result per runner of the subtree.

    A child that fails does not fail its siblings; its descendants are reported as
    `unreached` (the driver sends to them directly). Every wait is bounded by
    `hop_timeout_s` per level of the subtree below."""
    own = runner.set_weights(version, weights, filter_state)
    out: dict[str, dict[str, Any]] = {_own_name(): dict(own)}
    out.update(forward_weights(runner, version, weights, filter_state, children or [], hop_timeout_s))
    return out


def forward_weights(
    runner: Any,
    version: int,
    weights: np.ndarray,
    filter_state: dict | None,
    children: list,
    hop_timeout_s: float,
) -> dict[str, dict[str, Any]]:
    """Send `set_weights_tree` to each child subtree in parallel (see `relay_weights`)."""
    import concurrent.futures as cf

    out: dict[str, dict[str, Any]] = {}
    if not children:
        return out

    def unreached(subtree: list, why: str) -> None:
        for name in subtree_names(subtree)[1:]:
            out[name] = _error_entry(f"not reached: {why}", unreached=True)

    try:
        client = _peer_client()
    except Exception as e:  # no way to reach the cluster: the driver sends directly
        client, cause = None, f"{type(e).__name__}: {e}"
    else:
        cause = "this runner has no runtime client"
    if client is None:
        for sub in children:
            out[str(sub[0])] = _error_entry(f"not forwarded: {cause}", unreached=True)
            unreached(sub, f"not forwarded: {cause}")
        return out
    peers = runner.__dict__.setdefault("_weight_peers", _PeerHandles())
    futs: list[tuple[list, float, Any]] = []
    for sub in children:
        name, incarnation, grand = str(sub[0]), int(sub[1]), sub[2]
        budget = hop_timeout_s * subtree_height(sub)
        try:
            handle = peers.get(client, name, incarnation).options(timeout=budget)
            fut = handle.submit("set_weights_tree", version, weights, filter_state, grand, hop_timeout_s)
        except Exception as e:
            peers.drop(name)
            out[name] = _error_entry(e)
            unreached(sub, f"{name} failed")
            continue
        futs.append((sub, budget, fut))
    deadline = time.monotonic() + max((b for _, b, _ in futs), default=0.0) + 1.0
    for sub, _, fut in futs:
        name = str(sub[0])
        try:
            result = fut.result(timeout=max(0.0, deadline - time.monotonic()))
        except cf.TimeoutError:
            fut.cancel()
            peers.drop(name)
            out[name] = _error_entry(f"FtrlTimeoutError: no answer within {hop_timeout_s:g}s per hop")
            unreached(sub, f"{name} timed out")
            continue
        except Exception as e:
            peers.drop(name)
            out[name] = _error_entry(e)
            unreached(sub, f"{name} failed")
            continue
        entries = dict(result) if isinstance(result, dict) else {}
        own = entries.pop(name, None) or next(
            (entries.pop(k) for k in list(entries) if k not in subtree_names(sub)), None)
        out[name] = own if isinstance(own, dict) else {"weights_version": int(version)}
        for key in subtree_names(sub)[1:]:
            out[key] = entries.get(key) or _error_entry(f"no report from {name}", unreached=True)
    return out
