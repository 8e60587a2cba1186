"""Trained env steps per second (and per CPU-second) of APPO beside PPO at the same
shapes: 1, 2, 4 env runner actors x 1 or 8 CartPole envs, on the embedded local cluster
(real processes). Prints ONE JSON object.

    python benchmarks/async_throughput.py [--runners 1 2 4] [--envs 1 8] [--seconds 8]

Both learn, on the driver's learner, with the Sample Factory harness's throughput
settings (../shared/peers/sample_factory/throughput.py): batches of 1024 env steps, one
epoch of one minibatch, lr 3e-4, value loss coefficient 0.01, a [32] linear model.
Both use fragments of 1024 / (runners x envs) steps per env (`--appo-fragment 32`:
Sample Factory's 32-step trajectories for APPO); APPO samples them without rounds, each
runner a fragment ahead (`--no-sample-ahead`: when asked), PPO in synchronous rounds of
1024 steps. The window starts after 2 iterations;
`env_steps_trained_per_s` counts the steps the learner trained on in it, and
`per_cpu_s` divides by the CPU seconds of this process and every process it started
(coordinator, worker, runner and spare processes). APPO's `learner_busy_share` is the
learner thread's share of the window spent updating.

Targets (issue 27): APPO at least PPO's figure at every shape, ahead of Sample Factory
per CPU-second, learner busy share >= 0.8 with >= 2 runners.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402

from benchmarks.common import emit  # noqa: E402
from ftrl.config import APPOConfig, PPOConfig  # noqa: E402

MODEL = {"fcnet_hiddens": [32], "fcnet_activation": "linear", "vf_share_layers": True}


def config(algo: str, runners: int, envs: int, fragment: int | str = "auto", sample_ahead: bool = True,
           learner_queue_size: int | None = None):
    if algo == "APPO":
        queue = {} if learner_queue_size is None else {"learner_queue_size": learner_queue_size}
        cfg = (APPOConfig().training(train_batch_size=1024, lr=3e-4, vf_loss_coeff=0.01, model=MODEL, **queue)
               .env_runners(rollout_fragment_length=fragment, sample_ahead=sample_ahead)
               .reporting(min_time_s_per_iteration=0.5))
    else:
        cfg = (PPOConfig().training(train_batch_size=1024, minibatch_size=1024, num_epochs=1, lr=3e-4,
                                    vf_loss_coeff=0.01, model=MODEL))
    return (cfg.environment("CartPole-v1").env_runners(num_env_runners=runners, num_envs_per_env_runner=envs)
            .debugging(seed=0, log_level="ERROR"))


def cpu_seconds() -> float:
    """CPU seconds of this process and all its live descendants."""
    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def train_window(trainer, seconds: float) -> tuple[list[dict], float, float, int, int]:
    """Two iterations of warm-up, then rows for `seconds`: (rows, wall s, CPU s of the
    process tree, env steps trained, env steps sampled) over the window."""
    for _ in range(2):
        trainer.train()
    trained0, sampled0 = trainer.env_steps_trained, trainer.env_steps_sampled
    cpu0, t0 = cpu_seconds(), time.monotonic()
    rows = []
    while time.monotonic() - t0 < seconds:
        rows.append(trainer.train())
    wall, cpu = time.monotonic() - t0, cpu_seconds() - cpu0
    return rows, wall, cpu, trainer.env_steps_trained - trained0, trainer.env_steps_sampled - sampled0


def measure(algo: str, runners: int, envs: int, seconds: float, fragment: int | str = "auto",
            sample_ahead: bool = True, learner_queue_size: int | None = None) -> dict:
    t_build = time.monotonic()
    trainer = config(algo, runners, envs, fragment, sample_ahead, learner_queue_size).build(job_name=f"tp-{algo.lower()}-{runners}x{envs}")
    try:
        startup_s = time.monotonic() - t_build
        rows, wall, cpu, trained, sampled = train_window(trainer, seconds)
        out = {
            "algo": algo, "runners": runners, "envs_per_runner": envs, "startup_s": round(startup_s, 2),
            "rollout_fragment_length": trainer.config.get_rollout_fragment_length(),
            "window_s": round(wall, 2), "env_steps_trained": trained,
            "env_steps_sampled": sampled,
            "env_steps_trained_per_s": round(trained / wall, 1),
            "env_steps_trained_per_cpu_s": round(trained / cpu, 1) if cpu > 0 else None,
            "cpu_s": round(cpu, 2),
        }
        if algo == "APPO":
            busy = [r["learner_busy_share"] for r in rows]
            lags = [r["policy_lag_mean"] for r in rows if r["policy_lag_mean"] is not None]
            out.update({
                "learner_busy_share": round(sum(busy) / len(busy), 3),
                "policy_lag_mean": round(sum(lags) / len(lags), 2) if lags else None,
                "policy_lag_max": max((r["policy_lag_max"] or 0) for r in rows),
                "num_samples_dropped_stale": rows[-1]["num_samples_dropped_stale"],
            })
        return out
    finally:
        trainer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runners", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--no-sample-ahead", action="store_true",
                        help="APPO's runners sample when asked (sample_ahead=False), as before it existed")
    parser.add_argument("--rpc", action="store_true",
                        help="every sample by RPC, as on a TLS cluster (no sample channel)")
    parser.add_argument("--learner-queue-size", type=int, default=None,
                        help="APPO's learner_queue_size (default: the config's)")
    parser.add_argument("--appo-fragment", default="auto",
                        help='APPO\'s rollout_fragment_length ("auto": 1024 / (runners x envs), as PPO\'s; '
                        "32: Sample Factory's)")
    args = parser.parse_args()
    if args.rpc:  # the driver finds no channel token, as on a TLS cluster (runner_channels)
        from ftrl.rl.sampling import runner_channels

        runner_channels.channel_token = lambda client: None
    shapes = []
    for runners in args.runners:
        for envs in args.envs:
            fragment = args.appo_fragment if args.appo_fragment == "auto" else int(args.appo_fragment)
            pair = {"PPO": measure("PPO", runners, envs, args.seconds),
                    "APPO": measure("APPO", runners, envs, args.seconds, fragment, not args.no_sample_ahead,
                                    args.learner_queue_size)}
            ppo, appo = pair["PPO"], pair["APPO"]
            shapes.append({
                "runners": runners, "envs_per_runner": envs, "ppo": ppo, "appo": appo,
                "appo_vs_ppo_per_s": round(appo["env_steps_trained_per_s"] / ppo["env_steps_trained_per_s"], 3),
                "appo_vs_ppo_per_cpu_s": round(appo["env_steps_trained_per_cpu_s"]
                                               / ppo["env_steps_trained_per_cpu_s"], 3),
            })
            print(f"{runners}x{envs}: PPO {ppo['env_steps_trained_per_s']}/s, APPO "
                  f"{appo['env_steps_trained_per_s']}/s (busy {appo['learner_busy_share']})", file=sys.stderr)
    emit({"benchmark": "async_throughput", "env": "CartPole-v1", "seconds": args.seconds,
          "appo_fragment": args.appo_fragment, "sample_ahead": not args.no_sample_ahead,
          "learner_queue_size": args.learner_queue_size, "sample_channel": not args.rpc, "shapes": shapes,
          "appo_at_least_ppo_everywhere": all(s["appo_vs_ppo_per_s"] >= 1.0 for s in shapes),
          "busy_share_ok": all(s["appo"]["learner_busy_share"] >= 0.8 for s in shapes if s["runners"] >= 2)})


if __name__ == "__main__":
    main()
