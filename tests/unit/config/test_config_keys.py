"""One definition per config key: the facts declared on a key's field (how it may change
while a job trains, whether a mesh's learners must agree on it, whether a resume may
change it, what a schedule sets) are what `live_keys`, `check_live`, the learners'
config hash, the resume check and `python -m ftrl.config` read."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest

from ftrl.config import (
    ALGORITHMS,
    LIVE,
    NEVER,
    APPOConfig,
    Change,
    IMPALAConfig,
    IMPALATrainingConfig,
    Part,
    PPOConfig,
    PPOTrainingConfig,
    check_live,
    check_live_keys,
    config_class,
    config_facts,
    describe,
    live_keys,
    mesh_keys,
    mutable_keys,
    option,
    rebuild,
)
from ftrl.config.fields import check_schedule, non_negative_float, suggest
from ftrl.config.keys import (
    FACTS,
    REBUILT_IN_PLACE,
    Mutability,
    fixed_on_resume_keys,
    section_facts,
)
from ftrl.rl.algorithms.ppo import PPOLearner
from ftrl.rl.driver.state import check_resume_compatible
from ftrl.rl.learning.learner_group import LearnerGroup
from ftrl.rl.spaces import SpaceSpec
from ftrl.wire.errors import ConfigError

SPEC = SpaceSpec(obs_kind="box", obs_shape=(4,), obs_dim=4, act_kind="discrete", act_shape=(), act_dim=2)


@dataclass
class _TrainingWithNewKeys(PPOTrainingConfig):
    """PPO's section plus the keys a later issue might add, each declared on its own field only."""

    aux_loss_coeff: float = option(0.0, "weight of an auxiliary loss", check=non_negative_float)
    entropy_coeff_schedule: list | None = option(  # noqa: RUF009
        None, "[[env_step, entropy_coeff], ...]", check=check_schedule,
        change=LIVE, schedules="entropy_coeff",
    )
    aux_loss_scale: float = option(1.0, "a live key", check=non_negative_float, change=LIVE)
    use_lstm: bool = option(False, "a recurrent core", change=NEVER, fixed_on_resume=True)


class _PPOWithNewKeys(PPOConfig):
    training_cls = _TrainingWithNewKeys


def _group_hash(config: PPOConfig) -> str:
    """The config hash a learner group computes and hands to every learner it creates."""
    group = LearnerGroup(None, config, job_name="job", space_spec=SPEC.to_dict(),
                         learner_class="ftrl.rl.algorithms.ppo:PPOLearner")
    try:
        return group.config_hash
    finally:
        group.stop(kill=False)


# --------------------------------------------------------------------------- mesh agreement


def test_a_new_training_key_is_in_the_mesh_hash_with_no_other_edit():
    base = _PPOWithNewKeys().environment("CartPole-v1")
    other = base.copy().training(aux_loss_coeff=0.5)
    other.validate()
    assert "aux_loss_coeff" in mesh_keys(_PPOWithNewKeys)
    assert _group_hash(base) != _group_hash(other)
    assert _group_hash(base) == _group_hash(base.copy())


def test_today_s_mesh_keys_stay_covered():
    """The keys the learner classes listed by hand before (c79197e) are all declared `mesh`."""
    ppo = {"algo", "model", "num_epochs", "minibatch_size", "clip_param", "clip_param_schedule", "vf_loss_coeff",
           "entropy_coeff", "grad_clip", "normalize_advantages", "adam_epsilon", "gamma", "lambda_", "use_gae",
           "vf_clip_param", "lr", "lr_schedule", "num_gpus_per_learner"}
    ppo |= {"use_kl_loss", "kl_coeff", "kl_target"}  # added since: PPO's KL term
    impala = {"algo", "model", "lr", "lr_schedule", "gamma", "grad_clip", "vtrace", "vtrace_clip_rho_threshold",
              "vtrace_clip_pg_rho_threshold", "vf_loss_coeff", "entropy_coeff", "num_epochs", "minibatch_size",
              "opt_type", "decay", "momentum", "epsilon", "num_gpus_per_learner"}
    impala |= {"loss_reduction"}  # added since: the learners of one mesh must sum (or average) alike
    appo = impala | {"clip_param", "use_kl_loss", "kl_coeff", "kl_target", "target_network_update_freq", "tau"}
    assert set(mesh_keys(PPOConfig)) == ppo
    assert set(mesh_keys(IMPALAConfig)) == impala
    assert set(mesh_keys(APPOConfig)) == appo


def test_the_opted_out_training_keys_are_the_drivers_and_change_no_hash():
    """Every training key is a mesh key but those that only the driver reads."""
    for cls in (PPOConfig, IMPALAConfig, APPOConfig):
        training = section_facts(cls.training_cls)
        opted_out = {key for key, facts in training.items() if not facts.mesh}
        assert opted_out <= {"train_batch_size", "learner_queue_size", "broadcast_interval", "max_policy_lag",
                             "deterministic"}, cls
        assert "train_batch_size" in opted_out
    base = IMPALAConfig().environment("CartPole-v1").env_runners(num_env_runners=1)
    for change in ({"train_batch_size": 1000}, {"learner_queue_size": 7}, {"max_policy_lag": 3},
                   {"broadcast_interval": 2}, {"deterministic": True}):
        assert PPOLearner.mesh_config_hash(base.copy().training(**change), SPEC.to_dict()) == \
            PPOLearner.mesh_config_hash(base, SPEC.to_dict()), change
    assert PPOLearner.mesh_config_hash(base.copy().training(epsilon=1e-5), SPEC.to_dict()) != \
        PPOLearner.mesh_config_hash(base, SPEC.to_dict())


def test_keys_of_other_sections_are_mesh_keys_only_when_they_say_so():
    base = PPOConfig().environment("CartPole-v1")
    hash_of = lambda c: PPOLearner.mesh_config_hash(c, SPEC.to_dict())  # noqa: E731
    assert hash_of(base.copy().env_runners(num_env_runners=3)) == hash_of(base)
    assert hash_of(base.copy().learners(num_learners=2, num_gpus_per_learner=1)) != hash_of(base)
    assert hash_of(base.copy().environment("Pendulum-v1")) == hash_of(base)  # the spaces are hashed, not env


def test_a_learner_actor_and_its_group_hash_the_same_way():
    """The group hashes its config object, an actor the dict it was given: the same hash."""
    config = PPOConfig().environment("CartPole-v1").training(lr=1e-3, model={"fcnet_hiddens": [16]})
    assert PPOLearner.mesh_config_hash(config.to_dict(), SPEC.to_dict()) == _group_hash(config)


# --------------------------------------------------------------------------- live keys


def test_live_keys_are_exactly_today_s():
    common = {"lr", "lr_schedule", "gamma", "grad_clip"}
    ppo = common | {"lambda_", "use_gae", "minibatch_size", "num_epochs", "clip_param", "clip_param_schedule",
                    "vf_loss_coeff", "vf_clip_param", "entropy_coeff", "normalize_advantages", "adam_epsilon",
                    "use_kl_loss", "kl_target"}
    impala = common | {"num_epochs", "minibatch_size", "vtrace", "vtrace_clip_rho_threshold",
                       "vtrace_clip_pg_rho_threshold", "vf_loss_coeff", "entropy_coeff", "epsilon", "decay",
                       "momentum", "loss_reduction"}
    appo = impala | {"clip_param", "use_kl_loss", "kl_target", "target_network_update_freq", "tau"}
    assert live_keys("PPO") == ppo and live_keys("impala") == impala and live_keys("Appo") == appo
    with pytest.raises(ConfigError, match=r"unknown algorithm 'PPX'; known: \['APPO', 'IMPALA', 'PPO'\]"):
        live_keys("PPX")


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_only_keys_an_exploit_can_change_are_mutable(algo):
    facts = config_facts(config_class(algo))
    not_live = {key for key, f in facts.items() if f.change.kind is not Change.LIVE}
    assert {key for key, f in facts.items() if f.change.kind is Change.REBUILD} <= not_live
    assert not live_keys(algo) & not_live
    in_place = {key for key in not_live if facts[key].change.kind is Change.REBUILD
                and facts[key].change.parts <= REBUILT_IN_PLACE}
    assert mutable_keys(algo) == live_keys(algo) | in_place
    assert {"train_batch_size", "rollout_fragment_length", "checkpoint_interval", "keep_checkpoints",
            "metrics_num_episodes_for_smoothing"} <= in_place
    check_live_keys(algo, sorted(in_place))  # an exploit rebuilds their parts in place
    for key in sorted(not_live - in_place):
        with pytest.raises(ConfigError, match=rf"'{key}' cannot change while a {algo} job trains"):
            check_live_keys(algo, [key])
    # the runners or the learners are made again for these: every key but those fixed for a trial
    assert {"num_envs_per_env_runner", "env_config", "num_env_runners", "callbacks_class", "num_learners",
            "num_cpus_per_learner"} <= mutable_keys(algo)
    assert mutable_keys(algo) == set(facts) - {k for k, f in facts.items() if f.change.kind is Change.NEVER}
    assert not {"env", "model", "opt_type", "observation_filter"} & mutable_keys(algo)


def test_a_new_live_key_and_a_new_schedule_are_read_from_their_fields():
    config = _PPOWithNewKeys().environment("CartPole-v1")
    assert check_live(config, {"aux_loss_scale": 2.0}) == {"aux_loss_scale": 2.0}
    with pytest.raises(ConfigError, match="'aux_loss_coeff' cannot change while a PPO job trains"):
        check_live(config, {"aux_loss_coeff": 2.0})  # declares nothing: never
    assert check_live(config, {"entropy_coeff": 0.1}) == {"entropy_coeff": 0.1}
    config.training(entropy_coeff=0.2, entropy_coeff_schedule=[[0, 0.1], [1000, 0.0]])
    assert check_live(config, {"entropy_coeff": 0.1}) == {
        "entropy_coeff": 0.1, "entropy_coeff_schedule": [[0, 0.05], [1000, 0.0]]}


def test_a_key_under_its_schedule_scales_the_schedule():
    config = PPOConfig().environment("CartPole-v1").training(clip_param=0.2,
                                                            clip_param_schedule=[[0, 0.3], [100, 0.1]])
    values = check_live(config, {"clip_param": 0.24})
    assert values["clip_param"] == 0.24
    assert np.allclose(values["clip_param_schedule"], [[0, 0.36], [100, 0.12]])
    impala = IMPALAConfig().environment("CartPole-v1").training(lr=1e-3, lr_schedule=[[0, 1e-3], [100, 1e-4]])
    assert np.allclose(check_live(impala, {"lr": 5e-4})["lr_schedule"], [[0, 5e-4], [100, 5e-5]])
    given = [[0, 2e-3]]  # a schedule given beside its key (a resumed trial's) is taken as it is
    assert check_live(impala, {"lr": 5e-4, "lr_schedule": given})["lr_schedule"] == given
    assert impala.training_cfg.lr_schedule == [[0, 1e-3], [100, 1e-4]]  # nothing changed
    with pytest.raises(ConfigError, match="lr must be a number"):
        check_live(impala, {"lr": "fast"})


def test_why_a_key_cannot_change_is_said():
    with pytest.raises(ConfigError, match="'opt_type' cannot change while a IMPALA job trains: it is fixed for a "
                                          "trial"):
        check_live_keys("IMPALA", ["opt_type"])
    with pytest.raises(ConfigError, match="'deterministic' cannot change while a IMPALA job trains: it is fixed"):
        check_live_keys("IMPALA", ["deterministic"])
    with pytest.raises(ConfigError, match=r"'lr_schedul' cannot change .* no config key"):
        check_live_keys("PPO", ["lr_schedul"])


# --------------------------------------------------------------------------- resume


def _state(config: PPOConfig) -> dict:
    return {"config": config.to_dict(), "space_spec": SPEC.to_dict()}


def test_the_keys_fixed_on_resume_are_today_s_and_read_from_the_fields():
    assert fixed_on_resume_keys(PPOConfig) == ("algo", "env", "observation_filter", "model")
    assert fixed_on_resume_keys(APPOConfig) == ("algo", "env", "observation_filter", "model", "opt_type")
    base = IMPALAConfig().environment("CartPole-v1")
    check_resume_compatible(base, SPEC, _state(base.copy().training(lr=1e-2, epsilon=1e-5)))
    for change, match in [
        (lambda c: c.training(opt_type="rmsprop"), "was made with opt_type='rmsprop', this run has opt_type='adam'"),
        (lambda c: c.environment("Pendulum-v1"), "was made with env='Pendulum-v1'"),
        (lambda c: c.env_runners(observation_filter="MeanStdFilter"), "observation_filter"),
        (lambda c: c.training(model={"fcnet_hiddens": [8]}), "the checkpoint's model ModelConfig"),
    ]:
        with pytest.raises(ConfigError, match=match):
            check_resume_compatible(base, SPEC, _state(change(base.copy())))
    with pytest.raises(ConfigError, match=r"made with algo='PPO', this run has algo='IMPALA'; use another --output"):
        check_resume_compatible(base, SPEC, _state(PPOConfig().environment("CartPole-v1")))
    # a model dict spelled out with its defaults is the same model
    check_resume_compatible(base, SPEC, _state(base.copy().training(model={"fcnet_hiddens": [64, 64]})))


def test_a_new_key_fixed_on_resume_is_checked_with_no_other_edit():
    base = _PPOWithNewKeys().environment("CartPole-v1")
    check_resume_compatible(base, SPEC, _state(base.copy().training(aux_loss_coeff=1.0)))
    with pytest.raises(ConfigError, match="cannot exploit x: the checkpoint was made with use_lstm=True"):
        check_resume_compatible(base, SPEC, _state(base.copy().training(use_lstm=True)), action="exploit x")


# --------------------------------------------------------------------------- declarations


def test_every_shipped_key_says_how_it_may_change():
    """A key added to a shipped section must decide: live, rebuild (which parts) or never
    (on its field, or on the base section's field it redefines)."""
    for algo in ALGORITHMS:
        for section, cls in config_class(algo).section_classes().items():
            for f in dataclasses.fields(cls):
                declared = [k for k in cls.__mro__ if f.name in getattr(k, "__dataclass_fields__", {})
                            and "change" in k.__dataclass_fields__[f.name].metadata[FACTS]]
                assert declared, f"{algo} {section}.{f.name} declares no change="


def test_a_redefined_field_keeps_the_facts_it_does_not_restate():
    impala = section_facts(IMPALATrainingConfig)
    assert impala["lr"].live and impala["lr"].mesh  # IMPALA gives lr another default only
    assert not impala["train_batch_size"].mesh and impala["train_batch_size"].change.kind is Change.REBUILD
    assert IMPALATrainingConfig().lr == 5e-4


def test_declarations_are_checked():
    with pytest.raises(ValueError, match="a rebuild names its parts"):
        rebuild()
    with pytest.raises(ValueError, match="a rebuild names its parts"):
        Mutability(Change.LIVE, frozenset({Part.LEARNERS}))
    with pytest.raises(TypeError, match="change must be LIVE, NEVER or rebuild"):
        option(1.0, "doc", change="live")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="mesh must be a bool"):
        option(1.0, "doc", mesh=1)  # type: ignore[arg-type]

    @dataclass
    class _BadSchedule(PPOTrainingConfig):
        train_batch_size_schedule: list | None = option(None, "doc", schedules="train_batch_size")  # noqa: RUF009

    with pytest.raises(ValueError, match="schedules 'train_batch_size', which is not a live key"):
        section_facts(_BadSchedule)


def test_the_key_listing_shows_the_facts():
    text = describe("APPO")
    assert "algo = 'APPO'  [never, mesh, fixed on resume]" in text
    assert "learning rate  [live, mesh]" in text
    assert "where RMSProp adds it)  [live, mesh]" in text  # epsilon
    assert "[live, sets lr, mesh]" in text  # lr_schedule
    assert "[rebuild learner_thread]" in text  # learner_queue_size: the driver's
    assert "GPUs each learner takes  [rebuild learner_mesh, mesh]" in text


def test_one_suggest_for_config_keys_tune_keys_and_choices():
    assert suggest("lrr", ["lr", "gamma"]) == "; did you mean 'lr'?"
    assert suggest("zzz", ["lr", "gamma"]) == ""
    assert suggest(3, [1, 3]) == "; did you mean '3'?"


def test_a_bad_tune_table_key_gets_the_same_hint(tmp_path):
    from ftrl.tune.tuner import load_experiment_file

    path = tmp_path / "exp.toml"
    path.write_text('algo = "PPO"\nenv = "CartPole-v1"\n[tune]\nnum_sample = 2\n')
    with pytest.raises(ConfigError, match=r"unknown key 'num_sample' in \[tune\]; did you mean 'num_samples'\?"):
        load_experiment_file(path)
