"""Algorithms by name: the name of each algorithm (`algo = "PPO"` in a job file, `--algo
ppo`) -> the import path of its config class. The config class names its Algorithm
class by import path too (`algorithm_path`), so nothing here, in the client or in the
coordinator imports an algorithm (or torch) to read, check or submit a config.

To add an algorithm: its config class (a torch-free module, as ftrl/config/ppo.py), its
Algorithm (ftrl/rl/algorithms/NAME.py), and one line here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ftrl.config.fields import suggest
from ftrl.util.imports import import_class
from ftrl.wire.errors import ConfigError

if TYPE_CHECKING:
    from ftrl.config.builder import AlgorithmConfig

#: algorithm name (upper case) -> "module:ConfigClass"
ALGORITHMS: dict[str, str] = {
    "PPO": "ftrl.config.ppo:PPOConfig",
    "IMPALA": "ftrl.config.impala:IMPALAConfig",
    "APPO": "ftrl.config.appo:APPOConfig",
}


def config_class(algo: str) -> type[AlgorithmConfig]:
    """The config class for an algorithm name ("ppo", "PPO")."""
    path = ALGORITHMS.get(str(algo).upper())
    if path is None:
        raise ConfigError(
            f"unknown algorithm {algo!r}{suggest(str(algo).upper(), list(ALGORITHMS))}; "
            f"known: {sorted(ALGORITHMS)}"
        )
    return import_class(path)


def config_from_dict(config: dict | AlgorithmConfig) -> AlgorithmConfig:
    """An AlgorithmConfig from its `to_dict()` form (or itself), of the algorithm it names."""
    from ftrl.config.builder import AlgorithmConfig

    if isinstance(config, AlgorithmConfig):
        return config
    data = dict(config)
    if "algo" not in data:
        raise ConfigError("a config dict must name its algorithm ('algo')")
    return config_class(str(data["algo"])).from_dict(data)
