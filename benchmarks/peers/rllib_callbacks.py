"""Peer measurement: what a user's callbacks cost RLlib's sampling loop, to set beside
ftrl's ``benchmarks/callbacks.py``.

RLlib's new API stack, ``PPOConfig().environment("CartPole-v1")`` with
``num_env_runners=0`` (so only the algorithm's local ``SingleAgentEnvRunner``,
``algo.env_runner``, samples, in this process), 8 sub-envs, 256-step fragments, the
default PPO ``RLModule`` (torch, CPU). One fragment = ``env_runner.sample()`` (256 x 8
env steps, ``random_actions=False``) followed by ``env_runner.get_metrics()``, as the
algorithm's training step does after every sample (it reduces what the callbacks
logged; without it RLlib's ``MetricsLogger`` only accumulates).

Arms: no callbacks (RLlib's default ``RLlibCallback``, whose no-op methods RLlib still
calls), ``on_episode_end`` (logs the episode's length and return with
``metrics_logger.log_value``) and ``on_episode_step`` too (reads the step's info with
``episode.get_infos(-1)``). Each hooked arm has its own algorithm built with its
callbacks class; its runner alternates short chunks with its ``_callbacks`` list as
built ("on") and swapped for ``[RLlibCallback()]`` ("off"), order flipped every round,
so the arms differ only in the callback objects and the machine's drift falls on both.
Rates are env steps per CPU second of this process (``time.process_time``). As that
paired cost is noisy on a small shared machine, a separate pass also times RLlib's
per-episode callback dispatch (``_make_on_episode_callback``, hooks included) with the
callbacks on and off in alternate fragments, and turns the difference per env step
into a second cost figure.

Run (Ray is only in the peers venv; prints one JSON object on stdout, Ray's logs go to
stderr):

    /root/.cache/ftrl-peers/rllib-venv/bin/python benchmarks/peers/rllib_callbacks.py

Options: ``--rounds`` (default 20), ``--seconds`` (per chunk, default 2.0: a fragment
takes ~0.7 s here), ``--envs`` (8), ``--fragment`` (256), ``--hook-fragments`` (fragments per setting in the
dispatch-timing pass, 20), ``--torch-threads`` (default 1, as in a remote EnvRunner actor
with one CPU, which Ray starts with ``OMP_NUM_THREADS=1``; torch's default of one
thread per core here makes the idle thread spin and doubles the CPU time counted).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py
from typing import Any

from common import paired_costs

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def machine() -> dict[str, Any]:
    import gymnasium
    import ray
    import torch

    cpu = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "ray": ray.__version__, "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "gymnasium": gymnasium.__version__, "platform": platform.platform(),
            "date": time.strftime("%Y-%m-%d")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--fragment", type=int, default=256)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--hook-fragments", type=int, default=20)
    args = parser.parse_args()

    # Everything Ray/RLlib prints goes to stderr; stdout carries only the JSON.
    real_stdout = sys.stdout
    sys.stdout = sys.stderr
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)

    import ray
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.callbacks.callbacks import RLlibCallback

    class EpisodeEnd(RLlibCallback):
        """What a user does most: a value or two per finished episode."""

        def on_episode_end(self, *, episode: Any, metrics_logger: Any = None, **kwargs: Any) -> None:
            metrics_logger.log_value("length", len(episode))
            metrics_logger.log_value("ret", episode.get_return(), reduce="max")

    class EpisodeStep(EpisodeEnd):
        """A hook on every step as well (reads the step's info)."""

        def on_episode_step(self, *, episode: Any, metrics_logger: Any = None, **kwargs: Any) -> None:
            if episode.get_infos(-1):
                metrics_logger.log_value("info_keys", 1.0)

    # A remote EnvRunner actor (num_cpus=1) runs with OMP_NUM_THREADS=1; with torch's
    # default (one thread a core) here, the idle second thread spins and doubles the
    # process's CPU time for no speed-up on this 8-row policy forward.
    torch.set_num_threads(args.torch_threads)

    arms_cls = {"on_episode_end": EpisodeEnd, "on_episode_step": EpisodeStep}

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level=logging.WARNING, configure_logging=True)

    def build(cls: type) -> Any:
        cfg = (PPOConfig().environment("CartPole-v1")
               .env_runners(num_env_runners=0, num_envs_per_env_runner=args.envs,
                            rollout_fragment_length=args.fragment)
               .learners(num_learners=0)
               .callbacks(cls)
               .debugging(seed=0))
        return cfg.build_algo()

    algos = {arm: build(cls) for arm, cls in arms_cls.items()}
    runners = {arm: algo.env_runner for arm, algo in algos.items()}
    hooks = {arm: (list(r._callbacks), [RLlibCallback()]) for arm, r in runners.items()}
    for arm, r in runners.items():
        assert type(r).__name__ == "SingleAgentEnvRunner", type(r)
        assert [type(c) for c in r._callbacks] == [arms_cls[arm]], r._callbacks
        assert r.num_envs == args.envs, r.num_envs

    def chunk(arm: str, seconds: float, on: bool) -> float:
        runner = runners[arm]
        runner._callbacks = hooks[arm][0] if on else hooks[arm][1]
        runner.get_metrics()  # leave nothing logged by the other setting to reduce here
        steps, first = 0, True
        t0, cpu0 = time.perf_counter(), time.process_time()
        while time.perf_counter() - t0 < seconds:
            # Fresh episodes, started with the hooks as they are now (as ftrl's script).
            episodes = runner.sample(random_actions=False, force_reset=first)
            runner.get_metrics()
            steps += sum(e.env_steps() for e in episodes)
            first = False
        return steps / max(time.process_time() - cpu0, 1e-9)

    def hook_pass(arm: str, fragments: int) -> dict[str, Any]:
        """Wall time spent in RLlib's per-episode callback dispatch
        (`_make_on_episode_callback`: building the kwargs, `make_callback`, the hooks
        themselves) over `fragments` fragments per setting, the runner's callbacks on or
        off in alternate fragments (order flipped each pair); a µs-scale timer around each
        call, so preemption hardly lands in it."""
        runner = runners[arm]
        inner = runner._make_on_episode_callback
        spent: dict[str, dict[str, list[float]]] = {"off": {}, "on": {}}
        steps = {"off": 0, "on": 0}
        setting = ["off"]

        def timed(which: str, idx: int, episodes: Any) -> None:
            t = time.perf_counter()
            inner(which, idx, episodes)
            spent[setting[0]].setdefault(which, []).append(time.perf_counter() - t)

        runner.sample(force_reset=True)
        runner.get_metrics()
        runner._make_on_episode_callback = timed
        try:
            for i in range(fragments):
                for on in (("off", "on") if i % 2 == 0 else ("on", "off")):
                    setting[0] = on
                    runner._callbacks = hooks[arm][0] if on == "on" else hooks[arm][1]
                    steps[on] += sum(e.env_steps() for e in runner.sample())
                    runner.get_metrics()
        finally:
            del runner._make_on_episode_callback
        return {on: {"env_steps": steps[on],
                     "calls": {w: len(v) for w, v in sorted(spent[on].items())},
                     "us_per_call": {w: round(1e6 * sum(v) / len(v), 2) for w, v in sorted(spent[on].items())},
                     "us_per_env_step": round(1e6 * sum(sum(v) for v in spent[on].values()) / steps[on], 3)}
                for on in ("off", "on")}

    rates: dict[str, dict[str, list[float]]] = {arm: {"off": [], "on": []} for arm in arms_cls}
    try:
        for arm in runners:  # warm-up (RLlib's first few samples run 2-6x slower)
            chunk(arm, 2.0, True)
            chunk(arm, 2.0, False)
        for i in range(args.rounds):
            for arm in runners:
                for on in ((False, True) if i % 2 == 0 else (True, False)):
                    rates[arm]["on" if on else "off"].append(chunk(arm, args.seconds, on))
        hook_time = {arm: hook_pass(arm, args.hook_fragments) for arm in runners}
        # Sanity: the hooked runner's metrics do carry what the callbacks logged.
        runner = runners["on_episode_step"]
        runner._callbacks = hooks["on_episode_step"][0]
        runner.get_metrics()
        eps = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 1.0:
            eps += sum(1 for e in runner.sample() if e.is_done)
            logged = runner.get_metrics()
        episodes_per_s = eps / (time.perf_counter() - t0)
        logged_keys = sorted(k for k in ("length", "ret", "info_keys") if k in logged)
    finally:
        for algo in algos.values():
            algo.stop()
        ray.shutdown()

    arms: dict[str, Any] = {arm: paired_costs(r["off"], r["on"]) for arm, r in rates.items()}
    for arm, r in rates.items():
        h = hook_time[arm]
        extra_us = h["on"]["us_per_env_step"] - h["off"]["us_per_env_step"]
        arms[arm]["hook_dispatch"] = h
        arms[arm]["cost_from_hook_time"] = round(extra_us / (1e6 / statistics.median(r["off"])), 4)
        arms[arm]["dispatch_share_without"] = round(h["off"]["us_per_env_step"] / (1e6 / statistics.median(r["off"])), 4)
    result = {"benchmark": "rllib_callbacks", "peer": "ray.rllib SingleAgentEnvRunner (new API stack)",
              "env": "CartPole-v1", "envs": args.envs, "fragment": args.fragment,
              "rounds": args.rounds, "seconds_per_chunk": args.seconds,
              "timed": "env_runner.sample() + env_runner.get_metrics() per fragment, CPU seconds of this process",
              "episodes_per_s": round(episodes_per_s), "callback_metrics_seen": logged_keys,
              "arms": arms,
              "note": ("cost_paired_* : 1 - steps/s with / without, paired per round (noisy on a "
                       "shared 2-core VM); cost_from_hook_time: the extra wall time spent in RLlib's "
                       "per-episode callback dispatch with the hooks on (timed separately, "
                       "hook_dispatch) per env step, over the CPU time per env step without; "
                       "dispatch_share_without: the same dispatch with RLlib's default no-op "
                       "RLlibCallback, which RLlib always calls, over that CPU time"),
              "machine": machine()}
    sys.stdout = real_stdout
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
