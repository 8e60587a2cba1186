"""The sample channel on real processes: the runner group samples over it, a runner
SIGKILLed in the middle of a channel sample is recovered like any dead runner, training
goes on, and the next samples travel on a new channel to the new incarnation; a runner
busy-polls between rounds as `sample_busy_poll_s` says."""

from __future__ import annotations

import os
import signal
import threading
import time

from ftrl.config import PPOConfig
from ftrl.rl.sampling.runner_channels import channel_token as _channel_token
from ftrl.rl.sampling.sample_plane import SampleChannel
from ftrl.wire.errors import ActorUnavailableError
from tests.cluster import wait_until

JOB = "chan"


def _config() -> PPOConfig:
    return (
        PPOConfig()
        # 32 steps x 2 envs x 5 ms: each sample takes ~0.3 s, time to kill it mid-way
        .environment("ftrl.testing.envs:make_slow_env", env_config={"sleep_s": 0.005})
        .env_runners(num_env_runners=2, num_envs_per_env_runner=2, rollout_fragment_length=32,
                     sample_timeout_s=30.0)
        .training(train_batch_size=128, minibatch_size=64, num_epochs=1)
        .fault_tolerance(restart_failed_env_runners=True)
        .debugging(seed=0)
    )


def _pid(client, name: str) -> int:
    return int(client.actor(name)["pid"])


def test_runner_killed_during_a_channel_sample_is_recovered_on_a_new_channel(make_cluster):
    cluster = make_cluster(slots=2, preload="ftrl.rl.sampling.env_runner")
    client = cluster.client()
    algo = _config().build(client=client, job_name=JOB)
    group = algo.env_runner_group
    sent: list[tuple[str, int]] = []  # (runner, incarnation of the channel) per channel sample
    submit = group.sampling._submit_sample

    def recording_submit(slot, method, kwargs):
        fut = submit(slot, method, kwargs)
        if slot.channel is not None:
            sent.append((slot.name, slot.channel.incarnation))
        return fut

    group.sampling._submit_sample = recording_submit
    try:
        algo.train()
        victim = group.slots[0]
        assert victim.channel is not None and victim.channel.incarnation == victim.incarnation, \
            "the group did not open a sample channel"
        old_incarnation, old_channel = victim.incarnation, victim.channel
        assert (victim.name, old_incarnation) in sent

        # a sample in flight on the channel, then SIGKILL the runner while it steps
        fut = group.sampling._submit_sample(victim, "sample", {})
        pid = _pid(client, victim.name)
        threading.Event().wait(0.1)
        assert not fut.done(), "the sample finished before the kill"
        os.kill(pid, signal.SIGKILL)
        try:
            fut.result(timeout=10)
            raise AssertionError("a killed runner answered its sample")
        except ActorUnavailableError:
            pass
        victim.inflight = fut  # the group's round collects it: a failed sample -> recovery
        result = algo.train()
        assert old_channel.closed
        healthy = wait_until(lambda: (r := algo.train())["num_healthy_env_runners"] == 2 and r, timeout=60,
                             what="the killed runner recovered")
        assert healthy["num_env_runner_restarts"] >= 1
        assert result["num_env_runner_failures"] >= 1
        del sent[:]
        for _ in range(3):
            algo.train()
        assert victim.incarnation != old_incarnation
        assert victim.channel is not None and victim.channel is not old_channel
        assert victim.channel.incarnation == victim.incarnation
        new = [inc for name, inc in sent if name == victim.name]
        assert new and all(inc == victim.incarnation for inc in new), sent
    finally:
        algo.stop()


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_runner_busy_polls_between_rounds_only_as_configured(make_cluster):
    cluster = make_cluster(slots=2, preload="ftrl.rl.sampling.env_runner")
    client = cluster.client()
    token = _channel_token(client)
    spent = {}
    for poll_s in (0.0, 0.4):
        cfg = (PPOConfig().environment("CartPole-v1")
               .env_runners(num_envs_per_env_runner=1, rollout_fragment_length=8, sample_busy_poll_s=poll_s))
        name = f"{JOB}/poll/{poll_s}"
        handle = client.create_actor("ftrl.rl.sampling.env_runner:EnvRunner", name=name,
                                     kwargs={"config": cfg.to_dict(), "worker_index": 1}, max_restarts=0)
        info = handle.call("sample_address")
        channel = SampleChannel(info["address"], token, info["incarnation"])
        try:
            for _ in range(3):  # rounds 0.15 s apart: within the cap, so it polls ~4 x 0.15 s (at most 0.4)
                assert channel.submit({}, None, 30.0).result(timeout=30)["env_steps"] == 8
                time.sleep(0.15)
            pid = _pid(client, name)
            channel.submit({}, None, 30.0).result(timeout=30)
            before = _cpu_s(pid)
            time.sleep(1.0)  # no request comes
            spent[poll_s] = _cpu_s(pid) - before
        finally:
            channel.close()
            client.kill_actor(name)
    assert spent[0.4] > 0.1, spent  # it spun for the request that did not come, within its cap
    assert spent[0.0] < 0.1, spent  # off: it slept at once
