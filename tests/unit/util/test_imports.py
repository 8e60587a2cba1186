"""The one import-path helper: "package.module:Name"."""

from __future__ import annotations

import collections

import pytest

from ftrl.rl.sampling import env_factory
from ftrl.util.imports import import_class, import_object


def test_imports_objects_and_nested_names():
    assert import_object("collections:OrderedDict") is collections.OrderedDict
    assert import_object("os.path:join") is __import__("os").path.join
    assert import_object("collections:OrderedDict.fromkeys") == collections.OrderedDict.fromkeys
    assert import_class("ftrl.config:PPOConfig").__name__ == "PPOConfig"


@pytest.mark.parametrize("path", ["no_colon", "pkg.mod:", ":Name", "a b:C", "os:system; rm", "m:A..B", 3])
def test_malformed_paths_are_value_errors(path):
    with pytest.raises(ValueError, match=r"package\.module:Name"):
        import_object(path)


def test_missing_module_and_attribute_are_import_errors_naming_them():
    with pytest.raises(ImportError, match=r"cannot import module 'ftrl\.no_such_mod' of 'ftrl\.no_such_mod:X'"):
        import_object("ftrl.no_such_mod:X")
    with pytest.raises(ImportError, match=r"'collections' has no attribute 'Nope'"):
        import_object("collections:Nope")
    with pytest.raises(ImportError, match=r"'collections:OrderedDict' has no attribute 'nope'"):
        import_object("collections:OrderedDict.nope")
    # exact builtin types: an actor's start failure reports the type by name
    with pytest.raises(ImportError) as info:
        import_object("collections:Nope")
    assert type(info.value) is ImportError


def test_import_class_refuses_non_classes():
    with pytest.raises(TypeError, match="not a class"):
        import_class("os.path:join")


def test_env_factory_falls_back_to_gymnasium_for_paths_it_cannot_import():
    assert env_factory.resolve_creator("CartPole-v1") is None
    assert env_factory.resolve_creator("ftrl.no_such_mod:make") is None
    assert env_factory.resolve_creator("gymnasium.envs.classic_control:CartPole-v1") is None
    creator = env_factory.resolve_creator("gymnasium.envs.classic_control:CartPoleEnv")
    env = creator({})
    assert env.action_space.n == 2
    env.close()


def test_local_client_and_actor_host_use_it():
    from ftrl.worker import host
    from tests import local_client

    assert host.import_class is import_class
    assert local_client._construct("collections:OrderedDict", {}) == collections.OrderedDict()
    with pytest.raises(TypeError, match="not a class"):
        local_client._construct("os.path:join", {})


@pytest.mark.parametrize("old, new", [
    ("ftrl.rl.driver:AlgorithmDriver", "ftrl.rl.driver.actor:AlgorithmDriver"),
    ("ftrl.rl.env_runner:EnvRunner", "ftrl.rl.sampling.env_runner:EnvRunner"),
    ("ftrl.rl.learner_actor:LearnerActor", "ftrl.rl.learning.learner_actor:LearnerActor"),
    ("ftrl.rl.learner:PPOLearner", "ftrl.rl.algorithms.ppo:PPOLearner"),
    ("ftrl.rl.testing_envs:FlakyEnv", "ftrl.testing.envs:FlakyEnv"),
])
def test_class_paths_of_the_layout_before_the_rl_restructure_still_resolve(old, new):
    """Coordinator records, learner kwargs and users' job files written before the move."""
    assert import_object(old) is import_object(new)
