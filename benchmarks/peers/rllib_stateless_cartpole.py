"""Peer measurement: RLlib 2.60's PPO with an LSTM on its StatelessCartPole, as its tuned
example `rllib/tuned_examples/ppo/stateless_cartpole_ppo.py` configures it (new API stack,
MeanStdFilter connector, lr 3e-4, 6 epochs, vf_loss_coeff 0.05, the KL loss, shared value
layers, max_seq_len 50; the example asks for 350 within 2M env steps), to set beside
ftrl's `benchmarks/memory.py --what learn`. On this 2-core machine with 1 env runner (the
example's default is 3). Prints one JSON object: env steps and wall time until the mean
return reaches the target, and the curve.

    /root/.cache/ftrl-peers/rllib-venv/bin/python benchmarks/peers/rllib_stateless_cartpole.py [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", type=float, default=350.0)
    ap.add_argument("--max-steps", type=int, default=2_000_000)
    ap.add_argument("--max-minutes", type=float, default=30.0)
    args = ap.parse_args()

    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module import MeanStdFilter
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.examples.envs.classes.stateless_cartpole import StatelessCartPole

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    config = (PPOConfig()
              .environment(StatelessCartPole)
              .env_runners(num_env_runners=1, env_to_module_connector=lambda *a, **k: MeanStdFilter())
              .training(lr=3e-4, gamma=0.99, num_epochs=6, vf_loss_coeff=0.05, use_kl_loss=True)
              .rl_module(model_config=DefaultModelConfig(vf_share_layers=True, use_lstm=True, max_seq_len=50))
              .debugging(seed=args.seed))
    algo = config.build_algo()
    start = time.monotonic()
    curve, steps, ret, reached = [], 0, None, False
    while steps < args.max_steps and time.monotonic() - start < args.max_minutes * 60:
        result = algo.train()
        runners = result.get("env_runners", {})
        steps = int(runners.get("num_env_steps_sampled_lifetime", steps))
        ret = runners.get("episode_return_mean", ret)
        if ret is not None:
            curve.append((steps, round(float(ret), 1)))
        if ret is not None and ret >= args.target:
            reached = True
            break
    wall = time.monotonic() - start
    algo.stop()
    ray.shutdown()
    print(json.dumps({"benchmark": "rllib_stateless_cartpole_ppo_lstm", "ray": ray.__version__, "seed": args.seed,
                      "target": args.target, "reached": reached, "env_steps": steps, "wall_s": round(wall, 1),
                      "final_return": ret, "env_runners": 1, "curve": curve[:: max(1, len(curve) // 40)]}, indent=2))


if __name__ == "__main__":
    main()
