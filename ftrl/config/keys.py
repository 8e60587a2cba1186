"""What ftrl knows about each config key, declared once on the key's field (`option(...,
change=..., mesh=..., fixed_on_resume=..., schedules=...)`), and the readers every other
room derives its lists from.

A key's facts (`KeyFacts`):

- `change`: how it may change while a job trains. `LIVE`: read at every update, so it
  changes in place (PBT's exploit, `ftrl.config.live_keys`). `rebuild(Part...)`: read
  once, when the named parts are built, so it changes by rebuilding them; an exploit
  rebuilds the parts in `REBUILT_IN_PLACE` (the driver's own parts, the learner thread,
  the runners' fragment length, the runners and the learners themselves), so such a
  key changes by an exploit too
  (`ftrl.config.mutable_keys`). `NEVER`: fixed for a trial (the algorithm, the env, the
  model's shape, the optimizer's type, the observation filter's kind). A key that
  declares nothing is `NEVER`.
- `mesh`: whether the learners of one mesh must agree on it (hashed into the config hash
  the coordinator's rendezvous compares on join). Every key of the training section must,
  unless it says `mesh=False` (a section sets its default with `mesh_by_default`); a key
  of another section must not, unless it says `mesh=True`.
- `fixed_on_resume`: a resumed run (or a PBT exploit) must have the value its checkpoint
  was made with. A key holding a schema dict (`model`) is compared with its defaults filled in.
- `schedules`: a schedule key names the live key it sets at every update while it is set
  (`lr_schedule` sets `lr`): while it is set, an in-place change of that key scales it
  (`ftrl.config.live.check_live`).

The key that is no field, `algo` (`AlgorithmConfig.algo_name`, "algo" in `to_dict()`),
has its facts on the config class (`AlgorithmConfig.algo_key_facts`).

Readers: `config_facts`, `live_keys_of` (`ftrl.config.live_keys`), `schedules_of`,
`mesh_keys` and `mesh_values` (`Learner.mesh_config_hash`), `fixed_on_resume_keys` and
`check_fixed_on_resume` (the driver's `check_resume_compatible`). Imports no torch.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from ftrl.wire.errors import ConfigError

#: the metadata entry of a config field holding the facts its `option(...)` declared
FACTS = "facts"
#: the name `to_dict()` gives the algorithm's name
ALGO_KEY = "algo"


class Change(StrEnum):
    """How a key may change while a job trains."""

    LIVE = "live"  # read at every update: changes in place
    REBUILD = "rebuild"  # read when some parts are built: changes by rebuilding those parts
    NEVER = "never"  # fixed for a trial


class Part(StrEnum):
    """The parts of a running job that read a key when they are built (what a change of a
    `rebuild` key rebuilds)."""

    LEARNERS = "learners"  # the learners (model, loss settings); weights and optimizer state carried over
    LEARNER_MESH = "learner_mesh"  # the learner actors: how many, their resources, the mesh's timeouts
    LEARNER_THREAD = "learner_thread"  # the driver's asynchronous learner thread and its queue (IMPALA, APPO)
    FRAGMENTS = "fragments"  # the runners' fragment length (each runner takes a new one in place)
    ENV_RUNNERS = "env_runners"  # the sampling runners, their sub-envs, and the driver's group of them
    EVAL_RUNNERS = "evaluation_runners"  # the evaluation runners and their group
    DRIVER = "driver"  # the driver's own loop: its cadences, windows and checkpoint manager


@dataclass(frozen=True)
class Mutability:
    """How a key may change while a job trains: its `Change` and, for `REBUILD`, the parts."""

    kind: Change
    parts: frozenset[Part] = frozenset()

    def __post_init__(self) -> None:
        if (self.kind is Change.REBUILD) != bool(self.parts):
            raise ValueError(f"{self.kind} with parts {sorted(self.parts)}: a rebuild names its parts, "
                             "nothing else does")
        if not all(isinstance(p, Part) for p in self.parts):
            raise ValueError(f"parts must be Part members, got {sorted(map(str, self.parts))}")

    def __str__(self) -> str:
        if self.kind is Change.REBUILD:
            return f"rebuild {'+'.join(sorted(self.parts))}"
        return str(self.kind)


#: read at every update: changes in place
LIVE = Mutability(Change.LIVE)
#: fixed for a trial
NEVER = Mutability(Change.NEVER)
#: The parts an exploit rebuilds (ftrl.rl.driver.rebuild): the driver's own parts, its
#: learner thread and the runners' fragment length in the same processes; the runners
#: (training, evaluation) and the learners as new processes, since what they build from
#: the key (sub-envs, env_config, resources, the learners' timeouts) lives in them; the
#: learners carry their state over. A `rebuild` key naming only these changes by an
#: exploit as a live key does: today every part.
REBUILT_IN_PLACE = frozenset(Part)


def rebuild(*parts: Part) -> Mutability:
    """Changes by rebuilding `parts` (the parts that read the key when they are built)."""
    return Mutability(Change.REBUILD, frozenset(parts))


@dataclass(frozen=True)
class KeyFacts:
    """Everything ftrl knows about one config key besides its type, default, doc and check."""

    change: Mutability = NEVER
    mesh: bool = False
    fixed_on_resume: bool = False
    schedules: str | None = None

    @property
    def live(self) -> bool:
        return self.change.kind is Change.LIVE

    @property
    def mutable(self) -> bool:
        """Whether an exploit can change it: live, or rebuilt in place (`REBUILT_IN_PLACE`)."""
        return self.live or (self.change.kind is Change.REBUILD and self.change.parts <= REBUILT_IN_PLACE)

    def summary(self) -> str:
        """A few words for `python -m ftrl.config`: "live, mesh", "never, mesh, fixed on resume"."""
        words = [str(self.change)]
        if self.schedules:
            words.append(f"sets {self.schedules}")
        if self.mesh:
            words.append("mesh")
        if self.fixed_on_resume:
            words.append("fixed on resume")
        return ", ".join(words)


def declared(change: Mutability | None, mesh: bool | None, fixed_on_resume: bool | None,
             schedules: str | None) -> dict[str, Any]:
    """The facts `option(...)` was given (the rest are inherited or defaults), checked."""
    given: dict[str, Any] = {}
    if change is not None:
        if not isinstance(change, Mutability):
            raise TypeError(f"change must be LIVE, NEVER or rebuild(Part...), got {change!r}")
        given["change"] = change
    for name, value in (("mesh", mesh), ("fixed_on_resume", fixed_on_resume)):
        if value is not None:
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, got {value!r}")
            given[name] = value
    if schedules is not None:
        if not isinstance(schedules, str) or not schedules:
            raise TypeError(f"schedules must name a key, got {schedules!r}")
        given["schedules"] = schedules
    return given


# --------------------------------------------------------------------------- readers


@functools.cache
def section_facts(section_cls: type) -> dict[str, KeyFacts]:
    """Key -> its facts, for every field of section dataclass `section_cls`. A field that
    redefines a base class's field (another default) keeps the facts it does not restate;
    `mesh` defaults to the section's `mesh_by_default`."""
    merged: dict[str, dict[str, Any]] = {}
    for klass in reversed(section_cls.__mro__):
        for name, f in getattr(klass, "__dataclass_fields__", {}).items():
            merged.setdefault(name, {}).update(f.metadata.get(FACTS, {}))
    base = {"mesh": bool(getattr(section_cls, "mesh_by_default", False))}
    out = {f.name: KeyFacts(**{**base, **merged[f.name]}) for f in dataclasses.fields(section_cls)}
    for key, facts in out.items():
        target = facts.schedules
        if target is not None and (target not in out or not out[target].live):
            raise ValueError(f"{section_cls.__name__}.{key} schedules {target!r}, which is not a live key "
                             "of the same section")
    return out


class ConfigClass(Protocol):
    """What the readers need of an AlgorithmConfig class."""

    algo_key_facts: KeyFacts

    @classmethod
    def section_classes(cls) -> dict[str, type]: ...


def config_facts(config_cls: ConfigClass) -> dict[str, KeyFacts]:
    """Key -> its facts for every key of a config class's `to_dict()`: "algo", then the
    sections' keys in section order."""
    out = {ALGO_KEY: config_cls.algo_key_facts}
    for section_cls in config_cls.section_classes().values():
        out.update(section_facts(section_cls))
    return out


def live_keys_of(config_cls: ConfigClass) -> frozenset[str]:
    """The keys of a config class that change in place (declared `LIVE`)."""
    return frozenset(key for key, facts in config_facts(config_cls).items() if facts.live)


def mutable_keys_of(config_cls: ConfigClass) -> frozenset[str]:
    """The keys of a config class an exploit can change: live, or rebuilt in place."""
    return frozenset(key for key, facts in config_facts(config_cls).items() if facts.mutable)


def schedules_of(section_cls: type) -> dict[str, str]:
    """Live key -> the schedule key that sets it at every update while the schedule is set."""
    return {facts.schedules: key for key, facts in section_facts(section_cls).items() if facts.schedules}


def mesh_keys(config_cls: ConfigClass) -> tuple[str, ...]:
    """The keys the learners of one mesh must agree on, in `to_dict()` order."""
    return tuple(key for key, facts in config_facts(config_cls).items() if facts.mesh)


def mesh_values(config: Any) -> dict[str, Any]:
    """The values of an AlgorithmConfig's mesh keys (what its learners' config hash covers)."""
    flat: Mapping[str, Any] = config.to_dict()
    return {key: flat.get(key) for key in mesh_keys(type(config))}


def fixed_on_resume_keys(config_cls: ConfigClass) -> tuple[str, ...]:
    """The keys a resumed run (or an exploit) must share with its checkpoint, in `to_dict()` order."""
    return tuple(key for key, facts in config_facts(config_cls).items() if facts.fixed_on_resume)


def check_fixed_on_resume(config: Any, old: Mapping[str, Any], action: str = "resume") -> None:
    """ConfigError if an AlgorithmConfig `config` differs from the config dict a checkpoint
    was made with (`old`, its `to_dict()`) in a key declared `fixed_on_resume`; `action`
    ("resume", "exploit PATH") names what is refused. Plain keys are compared first, as
    text; a schema-valued key (`model`) after them, with its schema's defaults filled in."""
    new = config.to_dict()
    fixed = fixed_on_resume_keys(type(config))
    schemas = {f.name: f.metadata["schema"] for section_cls in config.section_classes().values()
               for f in dataclasses.fields(section_cls) if f.metadata.get("schema") is not None}
    hint = "; use another --output directory" if action == "resume" else ""
    for key in fixed:
        if key not in schemas and str(old.get(key)) != str(new.get(key)):
            raise ConfigError(f"cannot {action}: the checkpoint was made with {key}={old.get(key)!r}, this "
                              f"run has {key}={new.get(key)!r}{hint}")
    old_config = type(config).from_dict(old) if old else None  # the same algorithm: checked above
    for key in fixed:
        if key in schemas and old_config is not None:
            before, now = schemas[key](**getattr(old_config, key)), schemas[key](**getattr(config, key))
            if before != now:
                raise ConfigError(f"cannot {action}: the checkpoint's {key} {before} differs from this run's {now}")
