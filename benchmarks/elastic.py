"""Elastic learner group, gloo, a ~10M-parameter model: how long training stops.

- kill: SIGKILL a learner while an update runs -> the first update completed in the
  re-formed world (the interrupted update, retried whole by the survivors).
- join: the restarted learner is warm and waiting in the mesh -> the first completed
  update it takes part in (admitted at the next step boundary, state broadcast).
- full restart (the torchrun way, beside it): kill every learner -> the first update
  of a freshly started group that loaded the learner state (process start, torch
  import, model build, rendezvous, state load and broadcast).

Target: kill and join under 3 s each. Prints one JSON object.
Usage: python benchmarks/elastic.py [--learners 3] [--rounds 3] [--hidden 2240]
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time

import numpy as np
from common import emit, env_with_repo, summary

import ftrl
from ftrl.client.cluster import LocalCluster
from ftrl.rl.algorithms.ppo import PPO
from ftrl.rl.learning.learner_group import LearnerGroup
from ftrl.rl.sampling.env_factory import probe_spaces
from ftrl.rl.spaces import space_spec

MAX_UPDATES = 50  # updates to wait for a re-formation or a join before giving up


def fragments(steps: int, envs: int = 8, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    t = steps // envs
    return [{
        "obs": rng.normal(size=(t, envs, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, (t, envs)).astype(np.int64),
        "rewards": np.ones((t, envs), np.float32),
        "terminateds": np.zeros((t, envs), bool), "truncateds": np.zeros((t, envs), bool),
        "logp": np.full((t, envs), -0.69, np.float32), "values": np.zeros((t, envs), np.float32),
        "trunc_values": np.zeros((t, envs), np.float32), "valid": np.ones((t, envs), bool),
        "episode_ids": np.zeros((t, envs), np.int64), "last_values": np.zeros(envs, np.float32),
    }]


def busy(client, name: str) -> bool:
    try:
        return bool(client.get_actor(name).call("mesh_state")["busy"])
    except ftrl.FtrlError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--learners", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=2240)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    cfg = (ftrl.PPOConfig().environment("CartPole-v1")
           .training(model={"fcnet_hiddens": [args.hidden, args.hidden]}, train_batch_size=args.batch,
                     minibatch_size=args.batch, num_epochs=1)
           .learners(num_learners=args.learners, num_cpus_per_learner=0.5, learner_collective_timeout_s=60.0))
    spec = space_spec(*probe_spaces("CartPole-v1", {})).to_dict()
    batch = fragments(args.batch)
    kills, joins, warmups, updates, fulls = [], [], [], [], []
    with LocalCluster(workers=1, slots=8, spares=2, env=env_with_repo(), log_level="WARNING") as cluster:
        client = cluster.client()
        group = LearnerGroup(client, cfg, job_name="elastic", space_spec=spec, learner_class=PPO.learner_class_path)
        group.start()
        group.update(batch)
        params = int(group.get_weights()[1].size)
        for _ in range(3):
            t0 = time.perf_counter()
            group.update(batch)
            updates.append(time.perf_counter() - t0)
        for r in range(args.rounds):
            victim = f"elastic/learner/{r % args.learners}"
            pid = int(client.actor(victim)["pid"])
            before = group.entered_epoch
            # kill while the update is running
            box: dict[str, float] = {}

            def killer(victim: str = victim, pid: int = pid, box: dict = box) -> None:
                deadline = time.monotonic() + 60
                while not busy(client, victim) and time.monotonic() < deadline:
                    time.sleep(0.002)
                box["t_kill"] = time.perf_counter()
                os.kill(pid, signal.SIGKILL)

            th = threading.Thread(target=killer)
            th.start()
            out = group.update(batch)
            for _ in range(MAX_UPDATES):
                if out["mesh_epoch"] != before and out["num_learners"] < args.learners:
                    break
                out = group.update(batch)  # the kill landed after this update: next one
            else:
                raise SystemExit(f"the group never re-formed without {victim}")
            th.join(60)
            kills.append(time.perf_counter() - box["t_kill"])
            # wait until the restarted copy is warm and waiting in the mesh
            t_dead = box["t_kill"]
            deadline = time.monotonic() + 300
            while not client.get_mesh(group.group)["waiting"]:
                if time.monotonic() > deadline:
                    raise SystemExit(f"the restarted {victim} never joined the mesh")
                time.sleep(0.005)
            t_waiting = time.perf_counter()
            warmups.append(t_waiting - t_dead)
            out = group.update(batch)
            for _ in range(MAX_UPDATES):
                if out["num_learners"] == args.learners:
                    break
                out = group.update(batch)
            else:
                raise SystemExit(f"{victim} waited in the mesh but never took part in an update")
            joins.append(time.perf_counter() - t_waiting)
        # the torchrun way: every learner restarts, the state comes back from a checkpoint
        state = group.get_state()
        for rnd in range(2):
            t0 = time.perf_counter()
            group.stop(kill=True)
            fresh = LearnerGroup(client, cfg, job_name=f"full{rnd}", space_spec=spec,
                                 learner_class=PPO.learner_class_path)
            fresh.start()
            fresh.set_state(state)
            fresh.update(batch)
            fulls.append(time.perf_counter() - t0)
            group = fresh
        group.stop(kill=True)
    emit({
        "benchmark": "elastic",
        "backend": "gloo",
        "learners": args.learners,
        "model_parameters": params,
        "update_s": summary(updates),
        "kill_to_first_update_s": summary(kills),
        "join_waiting_to_first_update_s": summary(joins),
        "restart_warmup_s": summary(warmups),
        "full_group_restart_to_first_update_s": summary(fulls),
        "target_s": 3.0,
    })


if __name__ == "__main__":
    main()
