"""Atari throughput: APPO on Pong (Nature CNN, frames as uint8 end to end) at several
runners x envs shapes, on the embedded local cluster (real processes). Prints ONE JSON
object, with the Atari definition every run used (`ftrl.rl.sampling.atari.definition`).

    python benchmarks/atari.py [--shapes 1x16 2x8 2x32] [--seconds 60]
    python benchmarks/atari.py --what curve --minutes 30 [--shapes 1x16]   # + results/atari_pong_curve.png
    python benchmarks/atari.py --what restack     # frame stacks on the wire vs single frames
    python benchmarks/atari.py --what envs [--envs 8] [--seconds 30]   # the sub-envs alone

Per shape: agent steps and env frames (x frame_skip 4) trained per second and per
CPU-second (this process and every process it started: coordinator, worker, runners,
spares), the learner's busy share, the mean policy lag, the bytes of one fragment's
observations and how long one learner update took. The window starts after the first
2 iterations (the runners' torch import and the first weights are not counted).

Settings: APPO, `rollout_fragment_length` 32 (Sample Factory's Atari unroll), train
batches of 512 agent steps, lr 5e-4, one epoch, no observation filter, the learner on
the driver (one torch thread, `num_cpus_per_learner`).

`--what curve`: one run of `--minutes` on the first shape, learning settings closer to
RLlib's Pong APPO example (lr 6e-4, grad_clip 40, no sticky actions as RLlib's and
CleanRL's Pong examples), every row's training return (per life, clipped), the real
game's score (`custom_metrics["game_return_mean"]`) and frames so far, and a PNG.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.async_throughput import train_window  # noqa: E402
from benchmarks.common import emit  # noqa: E402
from ftrl.config import APPOConfig  # noqa: E402
from ftrl.rl.sampling.atari import definition  # noqa: E402

ENV = "atari:ALE/Pong-v5"
FRAME_SKIP = 4
#: no sticky actions, as RLlib's and CleanRL's Pong examples (the curve and --what envs)
NO_STICKY = {"repeat_action_probability": 0.0}


def config(runners: int, envs: int, fragment: int, batch: int, env_config: dict | None = None):
    return (APPOConfig().environment(ENV, env_config=env_config or {})
            .env_runners(num_env_runners=runners, num_envs_per_env_runner=envs, rollout_fragment_length=fragment)
            .training(train_batch_size=batch, lr=5e-4, vf_loss_coeff=0.5, entropy_coeff=0.01)
            .reporting(min_time_s_per_iteration=2.0)
            .debugging(seed=0, log_level="ERROR"))


def measure(runners: int, envs: int, seconds: float, fragment: int, batch: int) -> dict:
    t_build = time.monotonic()
    algo = config(runners, envs, fragment, batch).build(job_name=f"atari-{runners}x{envs}")
    try:
        startup_s = time.monotonic() - t_build
        rows, wall, cpu, steps, _ = train_window(algo, seconds)
        lags = [r["policy_lag_mean"] for r in rows if r.get("policy_lag_mean") is not None]
        learn_s = [r["learner"]["learn_time_s"] for r in rows if r.get("learner", {}).get("learn_time_s")]
        return {
            "runners": runners, "envs_per_runner": envs, "rollout_fragment_length": fragment,
            "train_batch_size": batch, "startup_s": round(startup_s, 1), "window_s": round(wall, 1),
            "agent_steps_trained": steps, "frames_trained_per_s": round(FRAME_SKIP * steps / wall, 1),
            "frames_trained_per_cpu_s": round(FRAME_SKIP * steps / cpu, 1) if cpu > 0 else None,
            "cpu_s": round(cpu, 1), "cores_used": round(cpu / wall, 2),
            "learner_busy_share": round(sum(r["learner_busy_share"] for r in rows) / len(rows), 3),
            "policy_lag_mean": round(sum(lags) / len(lags), 2) if lags else None,
            "learner_update_s": round(sum(learn_s) / len(learn_s), 3) if learn_s else None,
            "fragment_obs_bytes": fragment * envs * 4 * 84 * 84,
            "episode_return_mean": rows[-1].get("episode_return_mean"),
        }
    finally:
        algo.stop()


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(float(x), 3)


def curve(runners: int, envs: int, minutes: float, fragment: int, batch: int, png: Path) -> dict:
    """One learning run of `minutes` (see the module docstring)."""
    env_config = NO_STICKY
    cfg = config(runners, envs, fragment, batch, env_config).training(lr=6e-4, grad_clip=40.0)
    algo = cfg.build(job_name=f"atari-curve-{runners}x{envs}")
    points = []
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60 * minutes:
            row = algo.train()
            game = (row.get("custom_metrics") or {}).get("game_return_mean")
            points.append({"time_s": round(time.monotonic() - t0, 1), "frames": FRAME_SKIP * row["env_steps_sampled"],
                           "frames_trained": FRAME_SKIP * algo.env_steps_trained,
                           "episode_return_mean": row.get("episode_return_mean"), "game_return_mean": game,
                           "entropy": _rounded(row["learner"].get("entropy")),
                           "policy_lag_mean": _rounded(row.get("policy_lag_mean"))})
            print(f"{points[-1]['time_s']:7.1f} s {points[-1]['frames']:>10,} frames  life return "
                  f"{row.get('episode_return_mean')}  game {game}  entropy {points[-1]['entropy']}", file=sys.stderr)
    finally:
        algo.stop()
    _plot(points, png)
    games = [p["game_return_mean"] for p in points if p["game_return_mean"] is not None]
    return {"runners": runners, "envs_per_runner": envs, "minutes": minutes, "env_config": env_config,
            "lr": 6e-4, "grad_clip": 40.0, "rollout_fragment_length": fragment, "train_batch_size": batch,
            "frames": points[-1]["frames"] if points else 0,
            "game_return_first": games[0] if games else None, "game_return_last": games[-1] if games else None,
            "game_return_best": max(games) if games else None, "png": str(png), "points": points}


def restack(steps: int = 32, envs: int = 8, repeats: int = 20) -> dict:
    """What sending frame stacks costs beside single frames the learner restacks: one
    fragment's observations encoded, sent and received over a loopback socket pair, and
    decoded (ms each), and the learner's restack of single frames into stacks of 4."""
    import socket
    import threading

    import numpy as np

    from ftrl.wire import codec

    rng = np.random.default_rng(0)
    frame = 84 * 84
    stacked = rng.integers(0, 256, (steps, envs, 4 * frame), dtype=np.uint8)
    single = rng.integers(0, 256, (steps + 3, envs, frame), dtype=np.uint8)

    def wire(arr: np.ndarray) -> tuple[float, float]:
        a, b = socket.socketpair()
        total = codec.encode_parts({"obs": arr}, 1 << 16)[1]
        buf = bytearray(total)

        def receive() -> None:
            for _ in range(repeats):
                view, got = memoryview(buf), 0
                while got < total:
                    got += b.recv_into(view[got:])

        thread = threading.Thread(target=receive)
        thread.start()
        t0 = time.perf_counter()
        for _ in range(repeats):
            for part in codec.encode_parts({"obs": arr}, 1 << 16)[0]:
                a.sendall(part)
        thread.join()
        t1 = time.perf_counter()
        for _ in range(repeats):
            codec.decode_parts(bytes(buf))
        t2 = time.perf_counter()
        a.close()
        b.close()
        return (t1 - t0) / repeats * 1e3, (t2 - t1) / repeats * 1e3

    def restacked() -> np.ndarray:
        out = np.empty((steps, envs, 4, frame), np.uint8)
        for k in range(4):
            out[:, :, k] = single[k:k + steps]
        return out.reshape(steps, envs, -1)

    t0 = time.perf_counter()
    for _ in range(repeats):
        restacked()
    restack_ms = (time.perf_counter() - t0) / repeats * 1e3
    (s_send, s_decode), (f_send, f_decode) = wire(stacked), wire(single)
    return {"fragment": f"{steps} x {envs}", "stacked_bytes": stacked.nbytes, "single_bytes": single.nbytes,
            "stacked_send_receive_ms": round(s_send, 2), "stacked_decode_ms": round(s_decode, 2),
            "single_send_receive_ms": round(f_send, 2), "single_decode_ms": round(f_decode, 2),
            "restack_ms": round(restack_ms, 2)}


def env_steps(envs: int, seconds: float) -> dict:
    """`envs` of ftrl's Atari sub-envs (ale-py, the wrappers of `definition`) stepped one
    after another with random actions in this process, as a runner steps them, nothing
    else: env frames per second and per CPU-second (beside EnvPool's, `peers/cleanrl_atari.py
    --what envs`)."""
    import numpy as np

    from ftrl.rl.sampling.atari import make_atari

    subs = [make_atari(ENV.removeprefix("atari:"), NO_STICKY) for _ in range(envs)]
    for i, env in enumerate(subs):
        env.reset(seed=i)
    actions = np.random.default_rng(0).integers(0, subs[0].action_space.n, (1000, envs))

    def step(k: int) -> None:
        for i, env in enumerate(subs):
            _, _, terminated, truncated, _ = env.step(int(actions[k % 1000, i]))
            if terminated or truncated:
                env.reset()

    for k in range(50):
        step(k)
    t0, c0, k = time.perf_counter(), time.process_time(), 0
    while time.perf_counter() - t0 < seconds:
        step(k)
        k += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    frames = FRAME_SKIP * k * envs
    return {"envs": envs, "window_s": round(wall, 1), "frames_per_s": round(frames / wall, 1),
            "frames_per_cpu_s": round(frames / cpu, 1), "cores_used": round(cpu / wall, 2)}


def _plot(points: list[dict], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for key, label in (("game_return_mean", "game score (all lives, unclipped; 100-episode window)"),
                       ("episode_return_mean", "training return (per life, clipped)")):
        xy = [(p["frames"] / 1e6, p[key]) for p in points if p[key] is not None]
        if xy:
            ax.plot(*zip(*xy, strict=True), label=label)
    ax.set_xlabel("env frames (millions)")
    ax.set_ylabel("return")
    ax.set_title("ftrl APPO on Pong, 2-core CPU, Nature CNN")
    ax.grid(alpha=0.3)
    entropy = [(p["frames"] / 1e6, p["entropy"]) for p in points if p.get("entropy") is not None]
    if entropy:  # the policy's entropy (ln 6 = 1.79 for a uniform one) on its own axis
        right = ax.twinx()
        right.plot(*zip(*entropy, strict=True), color="grey", alpha=0.6, label="policy entropy (right axis)")
        right.set_ylabel("entropy (nats)")
        right.set_ylim(0.0, 2.0)
        right.legend(loc="lower right")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", choices=["throughput", "curve", "restack", "envs"], default="throughput")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--shapes", nargs="+", default=["1x16", "2x8", "2x32"])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--fragment", type=int, default=32)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--envs", type=int, default=8, help="--what envs: how many sub-envs")
    args = parser.parse_args()
    if args.what == "restack":
        emit({"benchmark": "atari_restack", **restack()})
        return
    if args.what == "envs":
        emit({"benchmark": "atari_envs", "atari": definition(ENV, NO_STICKY),
              **env_steps(args.envs, args.seconds)})
        return
    if args.what == "curve":
        runners, envs = (int(x) for x in args.shapes[0].split("x"))
        png = REPO / "benchmarks" / "results" / "atari_pong_curve.png"
        emit({"benchmark": "atari_curve", "algo": "APPO", "model": "Nature CNN",
              "atari": definition(ENV, NO_STICKY),
              **curve(runners, envs, args.minutes, args.fragment, args.batch, png)})
        return
    results = []
    for shape in args.shapes:
        runners, envs = (int(x) for x in shape.split("x"))
        result = measure(runners, envs, args.seconds, args.fragment, args.batch)
        print(f"{shape}: {result['frames_trained_per_s']} frames/s, {result['frames_trained_per_cpu_s']} per CPU-s, "
              f"busy {result['learner_busy_share']}, update {result['learner_update_s']} s", file=sys.stderr)
        results.append(result)
    emit({"benchmark": "atari", "algo": "APPO", "model": "Nature CNN", "atari": definition(ENV),
          "seconds": args.seconds, "shapes": results})


if __name__ == "__main__":
    main()
