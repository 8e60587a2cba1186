"""EnvRunner: E sub-environments stepped as a vector with one batched policy call per step.

Inference runs on `ftrl.rl.models.policy` (numpy by default, so runner processes never import
torch; `inference_backend="torch"` uses the torch module instead, as do a CNN and a custom
model, which have no numpy forward). Pixels (a uint8 Box, no filter) stay uint8 rows. The
loop over the in-process sub-envs at each vector step, with the reset of each sub-env whose episode
terminated in it, is `ftrl.rl.sampling.vector_step`: in C (`_vecstep.c`, built by `pip
install` where a C compiler is found; ~6% more steps/s on CartPole) or, without it or
with `FTRL_PURE_PYTHON=1`, its Python twin: the same calls, fragments and errors.

This module holds the runner's hot loop and its actor methods. The sub-envs' lifecycle
(build, reset, restart, close; episode bookkeeping) is its base class
(`ftrl.rl.sampling.sub_env_lifecycle`); the weight broadcast tree its `set_weights_tree`
and `pull_weights` take part in is `ftrl.rl.weights.tree`.

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

Hung env: the watchdog (`ftrl.rl.sampling.sub_env_lifecycle`'s docstring).
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
from ftrl.rl.callbacks import HookCaller, MetricsLogger, build_callbacks
from ftrl.rl.models.policy import inference_device, make_policy
from ftrl.rl.sample_batch import pack_bytes, stack_fragments
from ftrl.rl.sampling.env_factory import evaluation_env_config, with_render_mode
from ftrl.rl.sampling.episode_hooks import EpisodeHooks
from ftrl.rl.sampling.filters import NoFilter, make_filter
from ftrl.rl.sampling.recorder import EpisodeRecorder, sub_env_recorder
from ftrl.rl.sampling.sub_env import SubEnvError, make_sub_env
from ftrl.rl.sampling.sub_env_lifecycle import _UNWATCHED, SubEnvLifecycle, _Unwatched
from ftrl.rl.sampling.vector_step import loop_name, select_step_envs, sq_sum
from ftrl.rl.sampling.weights_inbox import WeightsInbox
from ftrl.rl.spaces import ObsEncoder, SpaceSpec, env_action
from ftrl.rl.weights import tree as weights_tree
from ftrl.util.watchdog import ProgressWatchdog
from ftrl.wire.errors import InvalidArgumentError

log = logging.getLogger(__name__)

#: the vector step over in-process sub-envs: in C when built, else its Python twin
#: (`ftrl.rl.sampling.vector_step`; `FTRL_PURE_PYTHON=1` picks Python)
_step_envs = select_step_envs()


class EnvRunner(SubEnvLifecycle):
    """Samples fixed-length time-major fragments from E sub-envs with the current policy.

    Args:
        config: `AlgorithmConfig.to_dict()` (or the config itself in-process).
        worker_index: 0 for the Algorithm's local runner, 1..N for remote ones.
        evaluation: apply `evaluation_config` overrides (explore, env_config).
        space_spec: the spaces the driver expects (`SpaceSpec.to_dict()`); checked.
        set_torch_threads: with the torch inference backend, call torch.set_num_threads(1)
            (actors: yes). The numpy backend (default) never imports torch.
        watchdog: kill this process when an env step hangs for `env_step_timeout_s`
            (`sub_env_lifecycle`'s docstring). None (default): on inside an actor process (a
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
        if evaluation:  # Atari: no episodic life nor reward clipping; the user's overrides
            overrides = cfg.evaluation_cfg.evaluation_config
            self.explore = bool(overrides.get("explore", False))
            self.env_config = evaluation_env_config(self.env_id, self.env_config, overrides)
            if cfg.evaluation_cfg.evaluation_video_interval > 0:  # frames on request only
                os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame renders off screen
                self.env_config = with_render_mode(self.env_id, self.env_config)
        self.remote_envs = run.remote_worker_envs
        self.max_episode_steps = cfg.environment_cfg.max_episode_steps
        self.num_workers = cfg.evaluation_cfg.evaluation_num_env_runners if evaluation else run.num_env_runners
        self.restart_sub_envs = ft.restart_failed_sub_environments
        self.max_restart_attempts = ft.max_num_sub_env_restart_attempts
        self.sub_env_timeout_s = max(run.sample_timeout_s, 1.0)
        seed = cfg.debugging_cfg.seed
        # distinct seeds per runner, and evaluation runners apart from training ones
        self._seed = None if seed is None else seed + 10_007 * self.worker_index + (500_009 if evaluation else 0)
        self._lock = threading.RLock()
        self._inbox = WeightsInbox()  # weights that came while a fragment was being sampled
        self._weights_plane: Any = None  # WeightsNode, started on first use
        self._sample_server: Any = None  # SampleServer, started on first sample_address()
        self._plane_lock = threading.Lock()

        self._watchdog: ProgressWatchdog | _Unwatched = _UNWATCHED
        from ftrl.client.context import get_runtime_context

        ctx = get_runtime_context()
        if watchdog is None:
            watchdog = ctx is not None
        if watchdog:
            ctx_name = ctx.name if ctx is not None else f"env runner {self.worker_index}"
            timeout = run.env_step_timeout_s
            if self.remote_envs:  # hung sub-env processes are handled per step first
                timeout = max(timeout, 2 * self.sub_env_timeout_s + 10.0)
            self._watchdog = ProgressWatchdog(timeout, what="env step", name=ctx_name)

        self._envs: list[Any] = []
        #: the user's callbacks (`callbacks_class`), their episode hooks (None: none overridden)
        self._callbacks: HookCaller | None = None
        self._episode_hooks: EpisodeHooks | None = None
        self._recorder: EpisodeRecorder | None = None  # set while an evaluation records a video
        self._callback_counts_sent: dict[str, int] = {}
        self._seeded = [False] * self.num_envs
        self._obs_misfits: dict[int, str] = {}
        self._recurrent = False  # set once the policy is built
        self._failures_logged = (time.monotonic(), 0)
        self._restarts_of = [0] * self.num_envs
        try:
            callbacks = build_callbacks(cfg.callbacks_cfg.callbacks_class)
            if callbacks is not None:
                kind = "evaluation runner" if evaluation else "env runner"
                self._callbacks = HookCaller(callbacks, f"{kind} {self.worker_index}")
                self._episode_hooks = EpisodeHooks.create(self._callbacks, self, self.num_envs, self._env_of)
            self.spec: SpaceSpec = self._build_and_check_envs(space_spec)
            self.encoder = ObsEncoder(self.spec)
            # a 1-D Box observation: rows of the right length are assigned directly
            self._row_obs = self.encoder.kind in ("box", "multibinary") and len(self.spec.obs_shape) == 1
            self._obs_dim = self.spec.obs_dim
            device = inference_device(run.num_gpus_per_env_runner if self.worker_index > 0 else 0.0)  # placed ones
            self.policy = make_policy(run.inference_backend, self.spec, cfg.model_config, self._seed, device)
            self._init_recurrent()
            if set_torch_threads and self.policy.backend == "torch":  # also a CNN or custom model's
                import torch

                torch.set_num_threads(1)
            self.filter = make_filter(run.observation_filter, (self.spec.obs_dim,), self.spec.unfiltered_columns())
        except BaseException:  # nothing left running: envs (and their processes), the watchdog
            self._close_envs()
            self._watchdog.close()
            raise
        self.weights_version = -1
        self._version_steps = 0  # this sample()'s vector steps times their weights version
        self._synced_filter: dict[str, Any] | None = None  # what the driver sent last (synced_filter)

        e, d = self.num_envs, self.spec.obs_dim
        self._row_dtype = self.spec.row_dtype(filtered=type(self.filter) is not NoFilter)
        self._obs = np.zeros((e, d), self._row_dtype)
        self._next_obs = np.zeros((e, d), self._row_dtype)
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
        self.info_values_dropped = 0  # info values sub-env processes could not send (callbacks)
        self.env_steps_total = 0
        self.episodes_total = 0
        self.num_samples = 0
        log.info("env runner %d: %d sub-env%s of %s, step loop: %s", self.worker_index, self.num_envs,
                 "" if self.num_envs == 1 else "s", self.env_id, self.step_loop)

    def _create(self, i: int) -> Any:
        """A new sub-env i: in this process, or in a child process (`remote_worker_envs`)."""
        where = {"worker_index": self.worker_index, "vector_index": i, "num_workers": self.num_workers,
                 "remote": self.remote_envs}
        env = make_sub_env(i, self.env_id, self.env_config, self.remote_envs, self.sub_env_timeout_s,
                           keep_info=self._episode_hooks is not None, where=where,
                           max_episode_steps=self.max_episode_steps)
        if i < len(self._seeded):
            self._seeded[i] = False
        return env

    def _env_of(self, i: int) -> Any:
        """Sub-env i's gymnasium env, for the callbacks (None for a sub-env process)."""
        return None if self.remote_envs else self._envs[i].env

    # ------------------------------------------------------------------ sampling

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
        The loop over in-process sub-envs is one `_step_envs` call per vector step
        (`ftrl.rl.sampling.vector_step`: in C when built, else its Python twin, the same
        contract); sub-env processes are stepped by `_step_remote`. The vector step also
        resets each sub-env whose episode terminated cleanly (the common episode end, ~46
        per CartPole fragment: a reset through the runner's Python calls cost as much
        again as the step), and `_end_episodes` then only records the episode;
        truncations (bootstrapped from the final observation), a sub-env owed its seeded
        first reset and failures go through `_reset_env`. A reset is part of its vector
        step for the hung-env watchdog.
        """
        if self._needs_reset or self._broken:
            self._full_reset()
            if self._recurrent:
                self._forget_states(range(self.num_envs))
        recurrent = self._recurrent
        starts = self._recurrent_inputs(steps) if recurrent and record else None
        seq_len = self._seq_len
        e, d = self.num_envs, self.spec.obs_dim
        b_obs = np.empty((steps, e, d), self._row_dtype) if record else None
        b_tval = np.zeros((steps, e), np.float32) if record else None
        b_valid = np.ones((steps, e), bool) if record else None
        b_epid = np.empty((steps, e), np.int64) if record else None
        b_term = np.zeros((steps, e), bool) if record else None
        b_trunc = np.zeros((steps, e), bool) if record else None
        b_act = np.empty((steps, e, *self.spec.action_row_shape), self.spec.action_dtype) if record else None
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
        box_obs = self._row_obs
        fast = False  # the first step writes through the encoder (checked shapes)
        fit = self._fit_obs
        remote = self.remote_envs
        step_fns = self._step_fns()
        step_envs = _step_envs
        recorder = self._recorder  # recording: episode ends reset here, after their last frame
        reset_fns = self._reset_fns() if recorder is None else None
        resets: list = []  # the vector step's resets at episode ends: (sub-env, outcome)
        restarts_seen = self.num_sub_env_restarts
        hooks = self._episode_hooks  # None without episode callbacks: no infos kept
        infos = hooks.infos if hooks is not None else None
        ep_ret = self._ep_ret
        ep_ids = self._ep_ids
        act, act_into = self.policy.act, self.policy.act_into
        now = time.monotonic
        isfinite = math.isfinite
        envs = range(e)
        t = -1
        last = steps - 1
        inbox = self._inbox
        try:
            for t in range(steps):
                wd.stamp = now()  # progress for the hung-env watchdog: one store per vector step
                if record:  # weights pushed meanwhile act from this step on (weights_inbox)
                    if inbox.has_weights:
                        self._load_weights(*inbox.take_weights(), None)
                    self._version_steps += self.weights_version
                if direct:
                    obs = fobs = b_obs[t]
                    nxt = b_obs[t + 1] if t < last else self._next_obs
                else:
                    obs = self._obs
                    fobs = filt(obs, update=update_filter)
                    nxt = self._next_obs
                if starts is not None and t % seq_len == 0:
                    self._note_sequence_start(starts, t)
                # one batched forward for all sub-envs
                if record:
                    a_t = b_act[t]
                    if recurrent:
                        self._act_recurrent(fobs, explore, a_t, b_logp[t], b_val[t])
                    else:
                        act_into(fobs, explore, a_t, b_logp[t], b_val[t])
                    if not direct:
                        b_obs[t] = fobs
                    b_epid[t] = ep_ids
                else:
                    a_t = self._act_recurrent(fobs, explore) if recurrent else act(fobs, explore)[0]
                env_actions = a_t.tolist() if discrete else env_action(spec, a_t)
                rew_l = [0.0] * e
                term_l = [False] * e
                trunc_l = [False] * e
                failed: dict[int, SubEnvError] = {}
                if remote:
                    self._step_remote(env_actions, nxt, rew_l, term_l, trunc_l, failed, infos)
                    for i in envs:
                        ep_ret[i] += rew_l[i]
                    ended = [i for i in envs if term_l[i] or trunc_l[i]]
                    # one reduction each; a non-finite sum sends us to the exact check
                    finite = isfinite(sum(rew_l)) and isfinite(sq_sum(nxt, nxt))
                else:  # in C when built, else its Python twin (ftrl.rl.sampling.vector_step)
                    ended, raised, finite, resets = step_envs(step_fns, env_actions, nxt, rew_l, term_l,
                                                              trunc_l, ep_ret, fit, fast, reset_fns, infos)
                    for i, exc in raised:
                        failed[i] = SubEnvError(i, f"step raised {type(exc).__name__}: {exc}")
                        failed[i].__cause__ = exc
                if self._obs_misfits:  # a structured observation that did not fit: that sub-env failed
                    self._take_misfits(failed)
                if not finite:
                    self._find_nan(nxt, rew_l, failed)
                fast = box_obs
                if failed:
                    self._handle_failures(failed, nxt, rew_l, term_l, trunc_l)
                    step_fns = self._step_fns()
                    reset_fns = self._reset_fns() if recorder is None else None
                    restarts_seen = self.num_sub_env_restarts
                    fast = False
                    if record:
                        for i in failed:
                            b_valid[t, i] = False
                    ended = [i for i in envs if term_l[i] or trunc_l[i]]  # failed ones are truncated
                if recurrent:  # what the next step's LSTM reads (episodes that ended: zeroed below)
                    self._prev_action[...] = a_t
                    self._prev_reward[...] = rew_l
                if hooks is not None:
                    hooks.stepped(rew_l, ended, failed)
                if recorder is not None:
                    recorder.stepped(rew_l[0], 0 in ended, 0 in failed)
                self._vec_steps += 1
                if record:
                    rew_rows.append(rew_l)
                if ended:
                    if record:
                        b_term[t] = term_l
                        b_trunc[t] = trunc_l
                    self._end_episodes(ended, failed, nxt, term_l, trunc_l, b_tval, t, resets)
                    if recurrent:
                        self._forget_states(ended)
                    if self.num_sub_env_restarts != restarts_seen:  # a reset failed: env replaced
                        step_fns = self._step_fns()
                        reset_fns = self._reset_fns() if recorder is None else None
                        restarts_seen = self.num_sub_env_restarts
                        fast = False
                if not direct:
                    self._obs, self._next_obs = nxt, obs
                if max_episodes is not None and len(self._done_returns) >= max_episodes and (
                        recorder is None or recorder.done):
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
            **(starts or {}),
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

    def set_fragment_length(self, steps: int) -> None:
        """Steps per sub-env of every fragment from the next one on (an exploit changed
        `rollout_fragment_length` or `train_batch_size`)."""
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise InvalidArgumentError(f"fragment_length must be a positive int, got {steps!r}")
        with self._lock:
            self.fragment_length = steps

    def sample(self, explore: bool | None = None, fragment_length: int | None = None,
               fragments: int = 1) -> dict[str, Any]:
        """Step every sub-env `rollout_fragment_length` times (`fragment_length`: the
        driver's current length, which this runner keeps from now on); `fragments` times
        over with the same weights, side by side along the env axis ([T, fragments * E]:
        columns are independent to the learner), so short fragments travel fewer at a time.

        Returns {"batch": fragment (see ftrl.rl.sample_batch), "episodes": {"returns",
        "lengths"} of episodes finished during this call (with callbacks that log custom
        metrics, "custom": {name: a value per episode, NaN where not logged}), "env_steps",
        "weights_version" (the first step's) and "weights_version_mean", "filter_delta", "num_sub_env_restarts"
        (cumulative), "sub_env_restarts" (during this call), "worker_index", "sample_time_s"}; with callbacks
        also "callback_counts" (errors, dropped values) and "sample_metrics" (`on_sample_end`'s)."""
        if fragment_length is not None and fragment_length != self.fragment_length:
            self.set_fragment_length(fragment_length)
        if not isinstance(fragments, int) or isinstance(fragments, bool) or not 1 <= fragments <= 4096:
            raise InvalidArgumentError(f"fragments must be an int in 1..4096, got {fragments!r}")
        with self._lock:
            t0 = time.perf_counter()
            restarts_before = self.num_sub_env_restarts
            self._load_waiting_weights()
            first_version, self._version_steps = self.weights_version, 0
            explore = self.explore if explore is None else explore
            try:
                batch = stack_fragments([self._run(self.fragment_length, explore, record=True)
                                         for _ in range(fragments)])
            except SubEnvError:
                self._take_episodes()
                raise
            self.num_samples += 1
            result = {
                "batch": batch,
                "episodes": self._take_episodes(),
                "env_steps": self.fragment_length * self.num_envs * fragments,
                "weights_version": first_version,  # the oldest; and the steps' mean (weights_inbox)
                "weights_version_mean": self._version_steps / (self.fragment_length * fragments),
                "filter_delta": self.filter.get_delta(flush=True),
                "num_sub_env_restarts": self.num_sub_env_restarts,
                "sub_env_restarts": self.num_sub_env_restarts - restarts_before,
                "worker_index": self.worker_index,
                "sample_time_s": time.perf_counter() - t0,
            }
            if self._callbacks is not None:
                self._sample_end(result)
            result["batch"] = pack_bytes(batch, self.spec.byte_columns)  # the images of a Dict as bytes
            return result

    def _sample_end(self, result: dict[str, Any]) -> None:
        """`on_sample_end` (its metrics, reduced, go to the driver's iteration values) and
        the callbacks' error and drop counts since the last sample."""
        assert self._callbacks is not None
        if "on_sample_end" in self._callbacks:
            logger = MetricsLogger(self._callbacks.drops)
            if self._callbacks.call("on_sample_end", env_runner=self, samples=result["batch"],
                                    metrics_logger=logger, worker_index=self.worker_index):
                result["sample_metrics"] = {k: [v, how] for k, (v, how) in logger.reductions().items()}
        now = {**self._callbacks.counts(), "num_info_values_dropped": self.info_values_dropped}
        result["callback_counts"] = {k: v - self._callback_counts_sent.get(k, 0) for k, v in now.items()}
        self._callback_counts_sent = now

    def evaluate(
        self,
        num_episodes: int | None = None,
        num_timesteps: int | None = None,
        explore: bool | None = None,
        max_env_steps: int = 1_000_000,
        record_video: bool = False,
    ) -> dict[str, Any]:
        """Run fresh episodes (all sub-envs reset first) without learning or filter updates.

        Stops after `num_episodes` finished episodes (or `max_env_steps`, so an env that
        never ends cannot hang it) or `num_timesteps` env steps (rounded up to whole
        vector steps). Returns {"returns", "lengths", "env_steps"} (and "custom", as
        `sample()`'s episodes, when the callbacks logged custom metrics). `record_video`:
        sub-env 0's first whole episode as an MP4 too, in "video" ({"mp4", "length",
        "return", "fps"}; ftrl.rl.sampling.recorder), the evaluation going on until it ended.
        """
        if (num_episodes is None) == (num_timesteps is None):
            raise ValueError("evaluate() needs exactly one of num_episodes or num_timesteps")
        with self._lock:
            self._load_waiting_weights()
            self._take_episodes()
            self._needs_reset = True
            explore = self.explore if explore is None else explore
            steps_before = self.env_steps_total
            recorder = self._recorder = (sub_env_recorder(lambda: self._envs[0].env, self.remote_envs, self.worker_index)
                                         if record_video else None)
            try:
                if num_timesteps is not None:
                    self._run(max(1, math.ceil(num_timesteps / self.num_envs)), explore, record=False)
                else:
                    while ((len(self._done_returns) < num_episodes or (recorder is not None and not recorder.done))
                           and self.env_steps_total - steps_before < max_env_steps):
                        self._run(1000, explore, record=False, max_episodes=num_episodes)
            finally:
                self._recorder = None
            episodes = self._take_episodes(first=num_episodes)
            self._needs_reset = True
            video = recorder.video() if recorder is not None else None
            return {**episodes, "env_steps": self.env_steps_total - steps_before,
                    **({"video": video} if video is not None else {})}

    def set_weights(self, version: int, weights: np.ndarray, filter_state: dict | None = None) -> dict[str, Any]:
        """Load policy weights (flat float32) tagged `version`, and optionally filter state;
        while a fragment is sampled, from its next vector step (the filter: the next fragment)."""
        if not self._lock.acquire(blocking=False):
            self._inbox.put(version, weights, filter_state)
            return {"weights_version": int(version), "waiting": True}
        try:
            self._inbox.take()  # anything waiting there came before these
            self._load_weights(version, weights, filter_state)
            return {"weights_version": self.weights_version}
        finally:
            self._lock.release()

    def _load_weights(self, version: int, weights: np.ndarray | None, filter_state: dict | None) -> None:
        if weights is not None:  # (None: loaded already, between the steps of a fragment)
            self.policy.set_flat(weights)
            self.weights_version = int(version)
        if filter_state is not None:
            self.filter.set_state(filter_state)
            self._synced_filter = filter_state

    def _load_waiting_weights(self) -> None:
        """Load the weights that came while the lock was held (the lock held)."""
        waiting = self._inbox.take()
        if waiting is not None:
            self._load_weights(*waiting)

    def synced_filter(self) -> dict[str, Any]:
        """The weights version and the observation filter state the driver sent with it
        last (None before any): the central filter, for a driver that lost its own."""
        with self._lock:
            self._load_waiting_weights()
            return {"weights_version": self.weights_version, "filter": self._synced_filter}

    def weights_address(self) -> str:
        """host:port of this runner's server on the weights plane (started on first use),
        from which its children in the broadcast tree pull."""
        return self._weights_node().address

    def sample_address(self) -> dict[str, Any]:
        """{"address": host:port, "incarnation": n} of this runner's sample channel server
        (`ftrl.rl.sampling.sample_plane.open_sample_server`, started on first use); address
        "" where there is none."""
        from ftrl.rl.sampling.sample_plane import open_sample_server

        with self._plane_lock:
            if self._sample_server is None:
                self._sample_server = open_sample_server(self, self.config.env_runners_cfg.sample_busy_poll_s)
            server = self._sample_server
        return {"address": server.address if server else "", "incarnation": server.incarnation if server else 0}

    def pull_weights(self, version: int, key: int, source: str, nbytes: int, filter_state: dict | None = None,
                     timeout_s: float = 60.0) -> dict[str, Any]:
        """Pull weights `version` (`nbytes` of float32, published as blob `key`) from the
        weights plane server at `source` (the driver or this runner's parent), serving
        them onward while they arrive, then load them like `set_weights`."""
        flat = weights_tree.pull_weights(self._weights_node(), source, key, nbytes, timeout_s)
        return self.set_weights(version, flat, filter_state)

    def _weights_node(self) -> Any:
        """This runner's node on the weights plane (`WeightsNode`), started on first use."""
        with self._plane_lock:
            if self._weights_plane is None:
                self._weights_plane = weights_tree.runner_node()
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
        `ftrl.rl.weights.tree`). Returns {runner name: {"weights_version": v}
        or {"error": "..."}} for this runner and its whole subtree."""
        return weights_tree.relay_weights(self, version, weights, filter_state, children, hop_timeout_s)

    def get_weights(self) -> tuple[int, np.ndarray]:
        with self._lock:
            self._load_waiting_weights()
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
            "fragment_length": self.fragment_length,
            "num_envs": len(self._envs),
            "num_dead_sub_envs": dead,
            "time": time.time(),
        }

    @property
    def step_loop(self) -> str:
        """What steps the sub-envs: "c" (ftrl/rl/sampling/_vecstep.c), "python" (not built,
        or `FTRL_PURE_PYTHON=1`) or "sub-env processes" (`remote_worker_envs`)."""
        if self.remote_envs:
            return "sub-env processes"
        return loop_name(_step_envs)

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
