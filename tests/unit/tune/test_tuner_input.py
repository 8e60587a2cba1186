"""Bad experiments are refused before anything starts, with the key named; a good one
becomes the experiment.json the tuner actor reads."""

from __future__ import annotations

import subprocess
import sys

import pytest

import ftrl
from ftrl import tune
from ftrl.tune.tuner import load_experiment_file
from tests.cluster import REPO


def base() -> ftrl.PPOConfig:
    return ftrl.PPOConfig().environment("CartPole-v1").training(train_batch_size=256, minibatch_size=128)


def make(param_space=None, scheduler=None, stop=None, **tune_kwargs):
    return ftrl.Tuner(base(), param_space=param_space,
                      tune_config=ftrl.TuneConfig(scheduler=scheduler, **tune_kwargs),
                      run_config=ftrl.RunConfig(name="x", storage_path="/tmp/never-written", stop=stop))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"param_space": {"lrr": tune.uniform(0.1, 0.2)}}, "lrr"),
    ({"param_space": {"lr": {"grid_search": []}}}, "lr"),
    ({"param_space": {"lr": {"loguniform": [1e-2, 1e-4]}}}, "lr"),
    ({"param_space": {"minibatch_size": tune.grid_search([128, 512])}}, "minibatch_size"),
    ({"scheduler": tune.PopulationBasedTraining(hyperparam_mutations={"entropy_coef": [0.0, 0.1]})}, "entropy_coef"),
    ({"scheduler": tune.PopulationBasedTraining(hyperparam_mutations={"env": ["CartPole-v1", "Acrobot-v1"]})},
     "'env'.*fixed for a trial"),
    ({"scheduler": tune.PopulationBasedTraining(quantile_fraction=0.6, hyperparam_mutations={"lr": [1e-3]})},
     "quantile_fraction"),
    ({"num_samples": 0}, "num_samples"),
    ({"max_concurrent_trials": 0}, "max_concurrent_trials"),
    ({"stop": {"iteration": "ten"}}, "iteration"),
])
def test_bad_experiments_are_refused_naming_the_key(kwargs, match):
    with pytest.raises(ftrl.ConfigError, match=match):
        make(**kwargs)


def test_pbt_refuses_a_key_fixed_for_a_trial_and_says_why():
    for key, why in (("observation_filter", "fixed for a trial"),
                     ("env", "fixed for a trial")):
        with pytest.raises(ftrl.ConfigError, match=rf"hyperparam_mutations\['{key}'\]: .*{why}"):
            ftrl.Tuner(base(), tune_config=ftrl.TuneConfig(scheduler=tune.PopulationBasedTraining(
                hyperparam_mutations={key: [1, 2]})), run_config=ftrl.RunConfig(name="x"))
    config = base().training(lr_schedule=[[0, 1e-3], [1000, 0.0]])  # lr under its schedule: scaled
    ftrl.Tuner(config, tune_config=ftrl.TuneConfig(scheduler=tune.PopulationBasedTraining(
        hyperparam_mutations={"lr": [1e-3, 2e-3], "adam_epsilon": [1e-5, 1e-4]})), run_config=ftrl.RunConfig(name="x"))


def test_a_good_experiment_has_its_trials_and_the_scheduler_state(tmp_path):
    tuner = ftrl.Tuner(
        base(), param_space={"lr": tune.loguniform(1e-4, 1e-2), "entropy_coeff": tune.grid_search([0.0, 0.01])},
        tune_config=ftrl.TuneConfig(num_samples=2, seed=7, scheduler=tune.PopulationBasedTraining(
            perturbation_interval=4, hyperparam_mutations={"lr": tune.loguniform(1e-4, 1e-2)})),
        run_config=ftrl.RunConfig(name="good", storage_path=str(tmp_path), stop={"training_iteration": 9}))
    state = tuner._state
    assert [t["trial_id"] for t in state["trials"].values()] == [f"good-{i}" for i in range(4)]
    assert sorted({t["config"]["entropy_coeff"] for t in state["trials"].values()}) == [0.0, 0.01]
    assert all(1e-4 <= t["config"]["lr"] <= 1e-2 for t in state["trials"].values())
    assert state["spec"]["stop"] == {"iteration": 9}
    assert state["scheduler"]["kind"] == "pbt" and state["scheduler"]["seed"] == 7
    assert state["metric"] == "episode_return_mean" and state["mode"] == "max"
    again = ftrl.Tuner(
        base(), param_space={"lr": tune.loguniform(1e-4, 1e-2), "entropy_coeff": tune.grid_search([0.0, 0.01])},
        tune_config=ftrl.TuneConfig(num_samples=2, seed=7),
        run_config=ftrl.RunConfig(name="good", storage_path=str(tmp_path)))
    assert [t["config"] for t in again._state["trials"].values()] == [t["config"] for t in state["trials"].values()]
    assert not (tmp_path / "good").exists()  # nothing is written before fit()


def test_the_example_experiment_file_loads(tmp_path):
    tuner = load_experiment_file(REPO / "examples" / "cartpole_pbt.toml", storage_path=str(tmp_path))
    assert tuner.name == "cartpole-pbt" and len(tuner._state["trials"]) == 4
    assert tuner._state["scheduler"]["time_attr"] == "env_steps_sampled"


def test_the_cli_refuses_a_bad_experiment_file_with_exit_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('algo = "PPO"\n[environment]\nenv = "CartPole-v1"\n[tune]\nnum_sample = 2\n')
    out = subprocess.run([sys.executable, "-m", "ftrl", "tune", str(bad)], capture_output=True, text=True,
                         timeout=60, cwd=REPO)
    assert out.returncode == 2
    assert "num_sample" in out.stderr and "num_samples" in out.stderr
    assert not (tmp_path / "ftrl_results").exists()
    missing = subprocess.run([sys.executable, "-m", "ftrl", "tune", "status", str(tmp_path / "nope")],
                             capture_output=True, text=True, timeout=60, cwd=REPO)
    assert missing.returncode == 2 and "not an ftrl tune experiment" in missing.stderr
