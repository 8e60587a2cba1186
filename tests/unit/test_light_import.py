"""`import ftrl` stays light (every public name is imported on first use), and the
`ftrl train` client side (CLI, job checks, embedded cluster set-up) never imports torch."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import ftrl

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("grpc", "numpy", "torch", "google.protobuf", "msgpack", "gymnasium")


def _loaded_after(code: str) -> list[str]:
    """The HEAVY modules loaded in a fresh interpreter after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         cwd=REPO, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_ftrl_loads_no_grpc_numpy_protobuf_or_torch():
    assert _loaded_after("import ftrl") == []
    assert _loaded_after("import ftrl\nassert ftrl.__version__") == []


def test_every_public_name_still_resolves():
    from ftrl.client.client import Client
    from ftrl.client.jobs import FINAL_STAGES
    from ftrl.wire.errors import ActorDiedError, FtrlError

    for name in ftrl.__all__:
        assert getattr(ftrl, name) is not None, name
    assert ftrl.Client is Client
    assert ftrl.ActorDiedError is ActorDiedError and issubclass(ftrl.ActorDiedError, FtrlError)
    assert ftrl.FINAL_JOB_STAGES is FINAL_STAGES
    assert ftrl.PPOConfig.__name__ == "PPOConfig"
    assert callable(ftrl.local_cluster)
    assert ftrl.client.cluster.LocalCluster.__name__ == "LocalCluster"  # subpackages as attributes
    assert set(ftrl.__all__) <= set(dir(ftrl))
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        ftrl.NoSuchName  # noqa: B018


def test_star_import_and_names_in_a_fresh_process_load_what_they_need():
    code = ("from ftrl import *\n"
            "assert Client.__name__ == 'Client' and issubclass(ActorDiedError, FtrlError)\n"
            "assert 'FINISHED' in FINAL_JOB_STAGES")
    assert "grpc" in _loaded_after(code)  # the client needs it, and gets it on first use
    assert "torch" not in _loaded_after(code)


def test_configs_are_made_checked_and_read_back_without_torch_or_the_rl_room():
    """The SDK's configs (and the registry that finds an algorithm by name) never load an
    algorithm: `ftrl.PPOConfig()` and a job file read as the client and coordinator do."""
    code = ("import ftrl\n"
            "from ftrl.config import config_from_dict, load_job\n"
            "c = ftrl.PPOConfig().environment('CartPole-v1').training(lr=1e-3, num_epochs=2)\n"
            "c.validate()\n"
            "assert config_from_dict(c.to_dict()) == c\n"
            "assert load_job(data={'algo': 'ppo', 'env': 'CartPole-v1'}).config.algo_name == 'PPO'\n"
            "a = ftrl.APPOConfig().environment('CartPole-v1').training(clip_param=0.3, opt_type='rmsprop')\n"
            "a.validate()\n"
            "assert config_from_dict(a.to_dict()) == a\n"
            "assert load_job(data={'algo': 'impala', 'env': 'CartPole-v1'}).config.algo_name == 'IMPALA'\n"
            "import sys\n"
            "rl = sorted(m for m in sys.modules if m.startswith('ftrl.rl'))\n"
            "assert not rl, rl\n")
    assert "torch" not in _loaded_after(code)


def test_version_is_the_packaged_one():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    from ftrl._version import __version__

    assert ftrl.__version__ == __version__ == project["version"]


def test_ftrl_train_client_side_imports_no_torch():
    """What the `ftrl train` process runs before and around its embedded cluster: the
    CLI parser, the job build and check (env probe, resume check), the cluster set-up."""
    code = (
        "import ftrl.cli\n"
        "from ftrl.cli import train as train_cli\nfrom ftrl.rl.driver import embedded\nfrom ftrl.rl.driver import state as algo_state\n"
        "from ftrl.client.cluster import LocalCluster\n"
        "args = ftrl.cli.build_parser().parse_args(['train', '--env', 'CartPole-v1', "
        "'--num-env-runners', '2'])\n"
        "job = ftrl.config.build_job(args)\n"
        "assert train_cli.check_job(job) is None\n"
        "preload = embedded.spare_preload(job.config)\n"
        "assert 'torch' not in preload.split(';')[0], preload\n"
        "assert 'ftrl.rl.driver.actor' in preload.split(';first:')[1], preload\n"
    )
    loaded = _loaded_after(code)
    assert "torch" not in loaded
    assert "gymnasium" in loaded  # the environment really was probed


def test_runners_that_infer_with_torch_get_spares_with_torch():
    from ftrl.config import PPOConfig
    from ftrl.rl.driver.embedded import spare_preload

    config = PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=2)
    assert spare_preload(config, driver=False) == "ftrl.rl.sampling.env_runner"
    config.env_runners(inference_backend="torch")
    assert spare_preload(config, driver=False) == "ftrl.rl.sampling.env_runner,torch"
    config.env_runners(inference_backend="numpy").learners(num_learners=2)  # learners host torch
    assert spare_preload(config, driver=False) == "ftrl.rl.sampling.env_runner,torch"
    # models with no numpy forward: CNN runners (Atari's, or asked for), an LSTM, a custom model
    for change in ({"env": "atari:ALE/Pong-v5"}, {"model": {"conv_filters": [[16, 3, 2]]}},
                   {"model": {"conv_type": "impala"}}, {"model": {"use_lstm": True}},
                   {"model": {"custom_model": "tests.custom_models:TinyNet"}}):
        cnn = PPOConfig().environment(change.get("env", "CartPole-v1")).training(model=change.get("model", {}))
        assert spare_preload(cnn, driver=False) == "ftrl.rl.sampling.env_runner,torch", change
    assert spare_preload(PPOConfig().environment("CartPole-v1").training(model={"conv_filters": []}),
                         driver=False) == "ftrl.rl.sampling.env_runner"  # fully connected, numpy
