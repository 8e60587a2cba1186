"""Job files: `load_job` reads a TOML (top-level `algo`, config keys or tables, a
[stop] table) into a JobSpec; `build_job` applies a command line's flags and `--set`
overrides on top; `describe` lists every key. Imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ftrl.config.builder import AlgorithmConfig, read_toml
from ftrl.config.fields import (
    check_value,
    describe_section,
    fields_of,
    option,
)
from ftrl.config.registry import config_class
from ftrl.wire.errors import ConfigError


@dataclass
class StopCriteria:
    """When `ftrl train` stops: any criterion that is set and met."""

    stop_reward: float | None = option(None, "stop when episode_return_mean >= this")
    stop_timesteps: int | None = option(None, "stop after this many env steps sampled")
    stop_iters: int | None = option(None, "stop after this many iterations")

    def met(self, result: Mapping[str, Any]) -> str | None:
        """The name of the first criterion `result` meets, or None."""
        ret = result.get("episode_return_mean")
        if self.stop_reward is not None and ret is not None and ret == ret and ret >= self.stop_reward:
            return "stop_reward"
        if self.stop_timesteps is not None and result.get("env_steps_sampled", 0) >= self.stop_timesteps:
            return "stop_timesteps"
        if self.stop_iters is not None and result.get("iteration", 0) >= self.stop_iters:
            return "stop_iters"
        return None

    def update(self, values: Mapping[str, Any]) -> None:
        """Set criteria from a [stop] table (unknown keys and bad types raise)."""
        checked = {
            key: check_value(StopCriteria, key, value, where="[stop]", prefix="stop ")
            for key, value in values.items()
        }
        for key, value in checked.items():
            setattr(self, key, value)


@dataclass
class JobSpec:
    """A job file: the algorithm config plus stop criteria."""

    config: AlgorithmConfig
    stop: StopCriteria


def load_job(path: str | Path | None = None, data: Mapping[str, Any] | None = None, algo: str | None = None) -> JobSpec:
    """Read a job TOML (or an already-parsed dict): top-level `algo`, config keys or tables,
    and an optional [stop] table."""
    raw = dict(data) if data is not None else (read_toml(path) if path is not None else {})
    stop_values = raw.pop("stop", {})
    if not isinstance(stop_values, Mapping):
        raise ConfigError("[stop] must be a table")
    name = algo or raw.get("algo") or "PPO"
    raw.pop("algo", None)
    cls = config_class(str(name))
    config = cls.from_dict(raw)
    stop = StopCriteria()
    stop.update(stop_values)
    return JobSpec(config=config, stop=stop)



def build_job(args: Any) -> JobSpec:
    """The job (config + stop criteria) from a command line's parsed arguments (the
    argparse Namespace of `ftrl train`, `ftrl submit` or the SLURM launcher): --config,
    --algo, --set overrides, then the flags; attributes it lacks are left as they are."""
    job = load_job(getattr(args, "config", None), algo=getattr(args, "algo", None))
    config = job.config
    if getattr(args, "overrides", None):
        config.update_from_dict(parse_overrides(args.overrides))
    flags = {
        "env": getattr(args, "env", None),
        "num_env_runners": getattr(args, "num_env_runners", None),
        "num_envs_per_env_runner": getattr(args, "num_envs_per_env_runner", None),
        "num_learners": getattr(args, "num_learners", None),
        "seed": getattr(args, "seed", None),
    }
    config.update_from_dict({k: v for k, v in flags.items() if v is not None})
    stop = job.stop
    for key in ("stop_reward", "stop_timesteps", "stop_iters"):
        value = getattr(args, key, None)
        if value is not None:
            setattr(stop, key, value)
    config.validate()
    return JobSpec(config=config, stop=stop)


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """KEY=VALUE strings to a dict; VALUE is parsed as TOML (bare words stay strings)."""
    import tomllib

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        out[key] = value
    return out


def describe(algo: str = "PPO") -> str:
    """Every key of `algo`'s config and of a job's [stop] table, by section (the TOML
    table and the builder method of the same name), with type, default, doc and, in
    brackets, its facts (ftrl/config/keys.py): how it may change while a job trains,
    whether a mesh's learners must agree on it, whether a resume may change it."""
    lines = [
        "[brackets]: live = changes in place while a job trains (PBT); rebuild PARTS = read when those parts "
        "are built; never = fixed for a trial; sets KEY = a schedule of KEY; mesh = the learners of one mesh "
        "must agree on it; fixed on resume = a resume must keep it",
        f"algo = {config_class(algo).algo_name!r}  [{config_class(algo).algo_key_facts.summary()}]",
    ]
    for section, cls in config_class(algo).section_classes().items():
        lines.append(f"[{section}]  {(cls.__doc__ or '').splitlines()[0]}")
        lines.extend(describe_section(cls, facts=True))
        for key, (_, f) in fields_of(cls).items():
            schema = f.metadata.get("schema")
            if schema is not None:
                lines.append(f"[{section}.{key}]  {(schema.__doc__ or '').splitlines()[0]}")
                lines.extend(describe_section(schema))
    lines.append(f"[stop]  {(StopCriteria.__doc__ or '').splitlines()[0]}")
    lines.extend(describe_section(StopCriteria))
    return "\n".join(lines)
