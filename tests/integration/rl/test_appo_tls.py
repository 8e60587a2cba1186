"""APPO on an mTLS cluster: its runners have no sample channel (the channel is plain TCP),
so every sample goes by RPC, whole fragments of at least 128 env steps a request (sampling
ahead by RPC was measured and not kept: benchmarks/README.md); a runner SIGKILLed
meanwhile is restarted and the run goes on."""

from __future__ import annotations

import os
import signal
import time

import pytest

from ftrl.client.client import ActorHandle
from ftrl.config import APPOConfig
from ftrl.rl.sampling.runner_channels import channel_token
from tests.cluster import FAST, cluster_env
from tests.integration.rl.test_train_driver import _actors
from tests.pki import make_pki
from tests.secure_cluster import SecureCluster


@pytest.mark.timeout(240)
def test_appo_on_an_mtls_cluster_samples_by_rpc_and_survives_a_runner_sigkill(tmp_path, monkeypatch):
    called: list[str] = []
    submit = ActorHandle.submit

    def recording_submit(self, method, *args, **kwargs):
        called.append(method)
        return submit(self, method, *args, **kwargs)

    monkeypatch.setattr(ActorHandle, "submit", recording_submit)
    pki = make_pki(tmp_path / "pki")
    with SecureCluster.mtls(pki, 1, 4, env=cluster_env(), **FAST) as cluster:
        client = cluster.client()
        assert channel_token(client) is None  # TLS: every sample by RPC
        config = (APPOConfig().environment("CartPole-v1")
                  .env_runners(num_env_runners=2, num_envs_per_env_runner=4, rollout_fragment_length=32)
                  .training(train_batch_size=256).reporting(min_time_s_per_iteration=0.5).debugging(seed=0))
        algo = config.build(client=client, job_name="appo-tls")
        try:
            rows = [algo.train() for _ in range(3)]
            assert called.count("sample") >= 8  # by RPC
            assert sum(r["num_learner_updates_this_iter"] for r in rows) >= 3
            victim = sorted(n for n in _actors("appo-tls") if "/env_runner/" in n)[0]
            os.kill(_actors("appo-tls")[victim], signal.SIGKILL)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not (rows[-1]["num_env_runner_restarts"] >= 1
                                                       and rows[-1]["num_healthy_env_runners"] == 2):
                rows.append(algo.train())
            assert rows[-1]["num_env_runner_restarts"] == 1 and rows[-1]["num_healthy_env_runners"] == 2
            trained = algo.env_steps_trained
            rows += [algo.train() for _ in range(2)]
            assert algo.env_steps_trained > trained
            assert rows[-1]["num_samples_lost"] <= 1  # at most the request the kill cut
        finally:
            algo.stop()
            client.close()
