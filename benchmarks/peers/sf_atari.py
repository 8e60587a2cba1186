"""Sample Factory 2.1.1 APPO on Pong beside `benchmarks/atari.py` (the same shapes, CPU
only): env frames trained per second and per CPU-second. Prints ONE JSON line.

Run with the Sample Factory venv (../shared/peers/sample_factory/setup.sh, plus
`pip install ale-py==0.9.0`, whose wheel ships the ROMs and works with its gymnasium 0.29):

    ~/.cache/ftrl-peers/sf-venv/bin/python benchmarks/peers/sf_atari.py --workers 2 --envs 8 --seconds 60

Sample Factory as its users run it: its own Atari env (`atari_pong`: PongNoFrameskip-v4,
no sticky actions, the SB3/CleanRL wrappers: 30 no-ops, frame skip 4 with max-pooling,
episodic life, fire on reset, clipped rewards, 84x84 grey, stack of 4), its Atari
defaults (`convnet_atari`, the Nature CNN), asynchronous APPO (its Atari default: no
V-trace; with it, 2.1.1's learner fails recording its summaries), 32-step rollouts, batches of 512 agent steps, one epoch, `--device=cpu`, no input or
return normalization (ftrl has neither on). Frames are counted where Sample Factory
counts them: its learner's env steps (agent steps x frame skip 4) after each batch, from
the end of the warm-up. CPU seconds: this process and every child, from /proc.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

import psutil


def cpu_seconds() -> float:
    total = 0.0
    me = psutil.Process()
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


class Meter:
    """The learner's env-step reports: the window starts after `warmup_s`, ends `seconds`
    later, then stops the run."""

    def __init__(self, warmup_s: float, seconds: float):
        self.warmup_s, self.seconds = warmup_s, seconds
        self.first = self.t0 = self.t1 = None
        self.steps0 = self.steps1 = 0
        self.cpu0 = self.cpu1 = 0.0

    def on_learner_steps(self, runner, msg, policy_id) -> None:
        from sample_factory.algo.utils.misc import LEARNER_ENV_STEPS

        now, steps = time.perf_counter(), int(msg[LEARNER_ENV_STEPS])
        if steps <= 0:
            return
        if self.first is None:
            self.first = now
        if self.t0 is None and now - self.first >= self.warmup_s:
            self.t0, self.steps0, self.cpu0 = now, steps, cpu_seconds()
        elif self.t0 is not None and self.t1 is None and now - self.t0 >= self.seconds:
            self.t1, self.steps1, self.cpu1 = now, steps, cpu_seconds()
            runner._stop_training()


def make_pong(env_name, cfg, env_config, render_mode=None):
    """Sample Factory's own Atari env, with ale-py's envs registered in this process
    (a spawned worker has not imported ale-py)."""
    import ale_py  # noqa: F401  (registers the ALE envs with gymnasium on import)
    from sf_examples.atari.atari_utils import make_atari_env

    return make_atari_env(env_name, cfg, env_config, render_mode=render_mode)


def sf_definition(cfg) -> dict:
    """The Atari definition of Sample Factory's env for `cfg`, read off a live one."""
    env = make_pong("atari_pong", cfg, None)
    try:
        wrappers = [w for w in _chain(env) if hasattr(w, "env")]
        by_name = {type(w).__name__: w for w in wrappers}
        ale = env.unwrapped.ale
        return {"env": env.unwrapped.spec.id, "frame_skip": cfg.env_frameskip,
                "noop_max": getattr(by_name.get("NoopResetEnv"), "noop_max", None),
                "frame_stack": cfg.env_framestack, "observation": list(env.observation_space.shape),
                "repeat_action_probability": float(ale.getFloat("repeat_action_probability")),
                "full_action_space": bool(env.action_space.n == 18),
                "time_limit": getattr(by_name.get("TimeLimit"), "_max_episode_steps", None),
                "max_num_frames_per_episode": int(ale.getInt("max_num_frames_per_episode")),
                "wrappers_outside_in": [type(w).__name__ for w in wrappers]}
    finally:
        env.close()


def _chain(env):
    while env is not None:
        yield env
        env = getattr(env, "env", None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup-seconds", type=float, default=20.0)
    parser.add_argument("--definition", action="store_true", help="print the Atari definition only")
    args = parser.parse_args()
    real_stdout = os.dup(1)
    os.dup2(2, 1)  # Sample Factory and its workers print: keep stdout for the JSON line
    tmp = tempfile.mkdtemp(prefix="sf-atari-")
    os.chdir(tmp)

    from sample_factory.algo.utils.misc import LEARNER_ENV_STEPS, ExperimentStatus
    from sample_factory.envs.env_utils import register_env
    from sample_factory.train import make_runner
    from sf_examples.atari.train_atari import parse_atari_args, register_atari_components

    register_atari_components()
    register_env("atari_pong", make_pong)
    argv = ["--env=atari_pong", "--experiment=tp", f"--train_dir={tmp}/train_dir", "--algo=APPO", "--device=cpu",
            "--async_rl=True", "--with_vtrace=False", f"--num_workers={args.workers}",
            f"--num_envs_per_worker={args.envs}", f"--worker_num_splits={2 if args.envs % 2 == 0 else 1}",
            "--rollout=32", "--batch_size=512", "--num_batches_per_epoch=1", "--num_epochs=1",
            "--normalize_input=False", "--normalize_returns=False", "--learning_rate=0.0005",
            "--save_every_sec=1000000", "--save_best_after=1000000000000",
            f"--train_for_seconds={int(args.warmup_seconds + args.seconds + 600)}"]
    cfg = parse_atari_args(argv)
    if args.definition:
        os.write(real_stdout, (json.dumps({"atari": sf_definition(cfg)}) + "\n").encode())
        return
    atari = sf_definition(cfg)
    cfg, runner = make_runner(cfg)
    meter = Meter(args.warmup_seconds, args.seconds)
    runner.policy_msg_handlers[LEARNER_ENV_STEPS].append(meter.on_learner_steps)
    t_start = time.perf_counter()
    status = runner.init()
    if status == ExperimentStatus.SUCCESS:
        status = runner.run()
    out = {"peer": "sample-factory 2.1.1", "algo": "APPO (async, no V-trace: its Atari default)", "atari": atari,
           "workers": args.workers, "envs_per_worker": args.envs, "rollout": 32, "batch_size": 512,
           "status": int(status), "startup_to_first_batch_s": None if meter.first is None
           else round(meter.first - t_start, 1)}
    if meter.t1 is not None:
        wall, cpu, frames = meter.t1 - meter.t0, meter.cpu1 - meter.cpu0, meter.steps1 - meter.steps0
        out.update({"window_s": round(wall, 1), "frames_trained": frames,
                    "frames_trained_per_s": round(frames / wall, 1),
                    "frames_trained_per_cpu_s": round(frames / cpu, 1) if cpu > 0 else None,
                    "cores_used": round(cpu / wall, 2)})
    out["machine"] = {"cores": os.cpu_count(), "python": platform.python_version()}
    os.write(real_stdout, (json.dumps(out) + "\n").encode())


if __name__ == "__main__":
    sys.exit(main())
