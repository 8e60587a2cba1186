"""Trial schedulers for `ftrl.tune`: FIFO and population-based training (PBT).

Everything here is pure: the PBT rules work on plain `Member` records and a `PBTState`,
so they are tested without a cluster. A tuner drives them like this, for each result a
running trial reports:

1. `state.report(trial_id, score, time)`;
2. `candidates = decide(trial_id, state, pbt)`: empty unless the trial is due for a
   perturbation and sits in the bottom quantile;
3. the exploit (ftrl.tune.exploit, the one donor loop) tries the candidates in turn:
   a donor whose checkpoint `checkpoint_usable` refuses is passed over (`record_skip`);
   the first usable one's checkpoint is loaded by the target in place with the donor's
   config `explore`d (`record_exploit`).

In `synch` mode the tuner waits until `synch_ready` before calling `decide` for every
member, and changes no scores in between.

Perturbed numeric values are clipped to their domain's bounds (unlike Tune, which lets
them leave the domain) and rounded to the domain's grid (integers, multiples of q).
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from ftrl.config.fields import suggest
from ftrl.config.user_code import import_user_code
from ftrl.tune.search import (
    Domain,
    domain_from_spec,
    is_grid,
    param_space_to_wire,
)
from ftrl.wire.errors import ConfigError

__all__ = [
    "TIME_ATTRS",
    "FIFOScheduler",
    "Member",
    "PBTState",
    "PopulationBasedTraining",
    "checkpoint_usable",
    "decide",
    "donor_candidates",
    "explore",
    "quantiles",
    "ready",
    "record_exploit",
    "record_skip",
    "scheduler_from_dict",
    "synch_ready",
]

TIME_ATTRS = ("iteration", "env_steps_sampled", "time_s")
"""The result fields PBT can measure time in."""

_TIME_ALIASES = {"training_iteration": "iteration", "time_total_s": "time_s"}


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _num(x: float) -> str:
    """A number for a message: 12 rather than 12.0."""
    return str(int(x)) if float(x).is_integer() else f"{x:.6g}"


def _check_fields(cls: type, d: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(d, Mapping):
        raise ConfigError(f"{cls.__name__}.from_dict needs a dict, got {d!r}")
    names = {f.name for f in fields(cls)}
    args = {k: v for k, v in d.items() if k != "kind"}
    for key in args:
        if key not in names:
            raise ConfigError(f"{cls.__name__} has no field {key!r}{suggest(key, names)}")
    return args


@dataclass
class FIFOScheduler:
    """Every trial runs until its stop condition; nothing is perturbed."""

    kind: ClassVar[str] = "fifo"

    def validate(self, valid_keys: Collection[str] = ()) -> None:
        """Nothing to check: FIFO has no knobs."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, {"kind": "fifo"}."""
        return {"kind": self.kind}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FIFOScheduler:
        """The scheduler `to_dict` described."""
        return cls(**_check_fields(cls, d))


def _load_fn(path: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The function an import path "pkg.mod:fn" names."""
    fn = import_user_code("custom_explore_fn", path)
    if not callable(fn):
        raise ConfigError(f"custom_explore_fn {path!r} is not callable")
    return fn


@dataclass
class PopulationBasedTraining:
    """Tune's PBT: bottom-quantile trials copy a top trial's checkpoint and perturb its config.

    `hyperparam_mutations` maps a config key to a list of values (moved to a neighbour),
    a `Domain` or a TOML-form domain dict such as `{"loguniform": [1e-5, 1e-2]}`.
    `max_checkpoint_lag` (ftrl's own) is how far, in `time_attr` units, a donor's
    checkpoint may lag behind the donor's newest result; None means `perturbation_interval`.
    """

    time_attr: str = "iteration"
    perturbation_interval: float = 10.0
    burn_in_period: float = 0.0
    hyperparam_mutations: dict[str, Any] = field(default_factory=dict)
    quantile_fraction: float = 0.25
    resample_probability: float = 0.25
    perturbation_factors: tuple[float, float] = (1.2, 0.8)
    custom_explore_fn: str | None = None
    synch: bool = False
    max_checkpoint_lag: float | None = None
    metric: str | None = None
    mode: str | None = None
    seed: int | None = None

    kind: ClassVar[str] = "pbt"

    def __post_init__(self) -> None:
        self.time_attr = _TIME_ALIASES.get(self.time_attr, self.time_attr)
        if isinstance(self.perturbation_factors, list):
            self.perturbation_factors = tuple(self.perturbation_factors)

    @property
    def checkpoint_lag_limit(self) -> float:
        """`max_checkpoint_lag`, or `perturbation_interval` where that is None."""
        if self.max_checkpoint_lag is None:
            return self.perturbation_interval
        return self.max_checkpoint_lag

    def mutations(self) -> dict[str, list[Any] | Domain]:
        """`hyperparam_mutations` with TOML-form domains turned into `Domain` objects."""
        out: dict[str, list[Any] | Domain] = {}
        for key, spec in self.hyperparam_mutations.items():
            where = f"hyperparam_mutations[{key!r}]"
            if isinstance(spec, list | tuple):
                if not spec:
                    raise ConfigError(f"{where}: an empty list has nothing to move to")
                out[key] = list(spec)
                continue
            if is_grid(spec):
                raise ConfigError(f"{where}: grid_search is not a mutation; give the list of values")
            try:
                value = domain_from_spec(spec)
            except ConfigError as e:
                raise ConfigError(f"{where}: {e}") from None
            if not isinstance(value, Domain):
                raise ConfigError(f"{where}: needs a list of values or a domain, got {spec!r}")
            out[key] = value
        return out

    def validate(self, valid_keys: Collection[str]) -> None:
        """Raise `ConfigError` naming the knob or key that cannot work."""
        if self.time_attr not in TIME_ATTRS:
            raise ConfigError(
                f"time_attr {self.time_attr!r} is not one of {', '.join(TIME_ATTRS)} "
                f"(or Tune's training_iteration, time_total_s)"
            )
        for name in ("perturbation_interval", "burn_in_period", "quantile_fraction",
                     "resample_probability"):
            if not _is_number(getattr(self, name)):
                raise ConfigError(f"{name} must be a number, got {getattr(self, name)!r}")
        if self.perturbation_interval <= 0:
            raise ConfigError(f"perturbation_interval must be > 0, got {self.perturbation_interval}")
        if self.burn_in_period < 0:
            raise ConfigError(f"burn_in_period must be >= 0, got {self.burn_in_period}")
        if not 0 < self.quantile_fraction <= 0.5:
            raise ConfigError(f"quantile_fraction must be in (0, 0.5], got {self.quantile_fraction}")
        if not 0 <= self.resample_probability <= 1:
            raise ConfigError(
                f"resample_probability must be in [0, 1], got {self.resample_probability}"
            )
        pf = self.perturbation_factors
        if not (isinstance(pf, tuple) and len(pf) == 2 and all(_is_number(x) and x > 0 for x in pf)):
            raise ConfigError(f"perturbation_factors must be two numbers > 0, got {pf!r}")
        lag = self.max_checkpoint_lag
        if lag is not None and not (_is_number(lag) and lag >= 0):
            raise ConfigError(f"max_checkpoint_lag must be a number >= 0 or None, got {lag!r}")
        if self.mode not in (None, "max", "min"):
            raise ConfigError(f"mode must be 'max' or 'min', got {self.mode!r}")
        if self.metric is not None and not isinstance(self.metric, str):
            raise ConfigError(f"metric must be a result field name, got {self.metric!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)):
            raise ConfigError(f"seed must be an integer or None, got {self.seed!r}")
        if not isinstance(self.hyperparam_mutations, Mapping):
            raise ConfigError(f"hyperparam_mutations must be a table, got {self.hyperparam_mutations!r}")
        for key in self.hyperparam_mutations:
            if key not in valid_keys:
                raise ConfigError(f"hyperparam_mutations[{key!r}]: not a config key{suggest(key, valid_keys)}")
        self.mutations()
        if not self.hyperparam_mutations and self.custom_explore_fn is None:
            raise ConfigError("PBT needs hyperparam_mutations or a custom_explore_fn to explore")
        if self.custom_explore_fn is not None:
            _load_fn(self.custom_explore_fn)

    def with_metric(self, metric: str | None, mode: str | None) -> PopulationBasedTraining:
        """A copy with metric/mode filled from the TuneConfig where unset here.

        Raises `ConfigError` if both set one and they differ.
        """
        out = copy.deepcopy(self)
        for name, value in (("metric", metric), ("mode", mode)):
            mine = getattr(self, name)
            if mine is not None and value is not None and mine != value:
                raise ConfigError(f"PBT {name} {mine!r} differs from the TuneConfig's {value!r}")
            setattr(out, name, mine if mine is not None else value)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form; mutations in `param_space_to_wire`'s form."""
        out: dict[str, Any] = {"kind": self.kind}
        for f in fields(self):
            out[f.name] = getattr(self, f.name)
        out["hyperparam_mutations"] = param_space_to_wire(self.mutations())
        out["perturbation_factors"] = list(self.perturbation_factors)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PopulationBasedTraining:
        """The scheduler `to_dict` (or a TOML table) described.

        Mutations come back as lists and `Domain` objects; a bad one raises `ConfigError`.
        """
        pbt = cls(**_check_fields(cls, d))
        if isinstance(pbt.hyperparam_mutations, Mapping):
            pbt.hyperparam_mutations = pbt.mutations()
        return pbt


def scheduler_from_dict(d: Mapping[str, Any]) -> FIFOScheduler | PopulationBasedTraining:
    """The scheduler a `to_dict()` described, chosen by its "kind"."""
    kinds = {"fifo": FIFOScheduler, "pbt": PopulationBasedTraining}
    kind = d.get("kind") if isinstance(d, Mapping) else None
    if kind not in kinds:
        raise ConfigError(f"scheduler kind must be one of {', '.join(kinds)}, got {kind!r}")
    return kinds[kind].from_dict(d)


# --------------------------------------------------------------------------- population state


@dataclass
class Member:
    """What PBT knows of one trial.

    `score` is the newest value of the metric (None until one is reported), `time` the
    `time_attr` value of the newest result, `alive` whether it runs now and `paused`
    whether it waits for its turn in a time-shared population. Alive and paused members
    are ranked; only alive ones are targets (a paused one donates its newest checkpoint).
    """

    trial_id: str
    score: float | None = None
    time: float = 0.0
    last_perturbation_time: float = 0.0
    alive: bool = True
    paused: bool = False
    config: dict[str, Any] = field(default_factory=dict)
    num_perturbations: int = 0
    num_exploits: int = 0

    @property
    def scored(self) -> bool:
        """Whether the member has a score to rank by (not None and not NaN)."""
        return self.score is not None and not math.isnan(self.score)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (a NaN score becomes None)."""
        d = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self)}
        if not self.scored:
            d["score"] = None
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Member:
        """The member `to_dict` described."""
        return cls(**copy.deepcopy(_check_fields(cls, d)))


def ready(member: Member, pbt: PopulationBasedTraining) -> bool:
    """Whether the member is due: an interval since its last perturbation, past burn-in."""
    return (
        member.time - member.last_perturbation_time >= pbt.perturbation_interval
        and member.time >= pbt.burn_in_period
    )


def _members(members: Iterable[Member] | Mapping[str, Member]) -> list[Member]:
    return list(members.values() if isinstance(members, Mapping) else members)


def quantiles(
    members: Iterable[Member] | Mapping[str, Member], pbt: PopulationBasedTraining
) -> tuple[list[str], list[str]]:
    """(bottom, top) trial ids: bottom worst first, top best first.

    Only alive or paused members with a score count. Each quantile has ceil(n * quantile_fraction)
    members, at most n // 2; fewer than 2 scored members give ([], []). Mode "min" ranks
    low scores best; equal scores rank by trial_id.
    """
    if pbt.mode not in ("max", "min"):
        raise ConfigError(f"PBT needs mode 'max' or 'min' to rank trials, got {pbt.mode!r}")
    scored = [m for m in _members(members) if (m.alive or m.paused) and m.scored]
    n = len(scored)
    if n < 2:
        return [], []
    sign = 1.0 if pbt.mode == "max" else -1.0
    ranked = [m.trial_id for m in sorted(scored, key=lambda m: (sign * m.score, m.trial_id))]
    k = min(math.ceil(n * pbt.quantile_fraction - 1e-9), n // 2)
    return ranked[:k], ranked[::-1][:k]


def _explore_list(value: Any, values: list[Any], pbt: PopulationBasedTraining,
                  rng: random.Random) -> Any:
    if value not in values or rng.random() < pbt.resample_probability:
        return copy.deepcopy(rng.choice(values))
    i = values.index(value) + rng.choice((-1, 1))
    return copy.deepcopy(values[min(max(i, 0), len(values) - 1)])


def explore(config: Mapping[str, Any], pbt: PopulationBasedTraining,
            rng: random.Random) -> dict[str, Any]:
    """A perturbed copy of `config`, by Tune's rules, for each key in the mutations.

    With probability `resample_probability` (always, if the current value is not in the
    list or not a number) the value is resampled from the list or domain. Otherwise a list
    value moves to a neighbour (-1 or +1, clamped at the ends), a choice domain likewise,
    and a numeric domain's value is multiplied by one of `perturbation_factors` and then
    `Domain.project`ed: rounded (integers, multiples of q) and clipped to its bounds.
    Last, `custom_explore_fn` (if any) maps the whole new config.
    """
    new = copy.deepcopy(dict(config))
    for key, spec in pbt.mutations().items():
        value = config.get(key)
        if isinstance(spec, list):
            new[key] = _explore_list(value, spec, pbt, rng)
        elif not spec.is_numeric:
            new[key] = _explore_list(value, list(spec.categories), pbt, rng)
        elif not _is_number(value) or rng.random() < pbt.resample_probability:
            new[key] = spec.sample(rng)
        else:
            new[key] = spec.project(value * rng.choice(pbt.perturbation_factors))
    if pbt.custom_explore_fn is not None:
        out = _load_fn(pbt.custom_explore_fn)(new)
        if not isinstance(out, dict):
            raise ConfigError(
                f"custom_explore_fn {pbt.custom_explore_fn!r} returned {type(out).__name__}, "
                "not a config dict"
            )
        new = out
    return new


def donor_candidates(target_id: str, members: Iterable[Member] | Mapping[str, Member],
                     pbt: PopulationBasedTraining, rng: random.Random) -> list[str]:
    """The top-quantile ids, shuffled with `rng`, if the target (alive) is in the bottom; else []."""
    bottom, top = quantiles(members, pbt)
    target = {m.trial_id: m for m in _members(members)}.get(target_id)
    if target_id not in bottom or target is None or not target.alive:
        return []
    candidates = [t for t in top if t != target_id]
    rng.shuffle(candidates)
    return candidates


def checkpoint_usable(checkpoint: Mapping[str, Any] | None, donor: Member,
                      pbt: PopulationBasedTraining) -> str | None:
    """None if the donor's checkpoint may be copied, else why not.

    The reasons: "missing", "unreadable" (the checkpoint has an "error", or no numeric
    "time") and "over-age: ..." (more than the lag limit behind the donor's newest result).
    """
    if checkpoint is None:
        return "missing"
    if checkpoint.get("error") or not _is_number(checkpoint.get("time")):
        return "unreadable"
    lag = donor.time - checkpoint["time"]
    limit = pbt.checkpoint_lag_limit
    if lag > limit:
        return (
            f"over-age: checkpoint at T={_num(checkpoint['time'])} is {_num(lag)} behind the "
            f"donor's result at T={_num(donor.time)} (max_checkpoint_lag {_num(limit)})"
        )
    return None


def synch_ready(members: Iterable[Member] | Mapping[str, Member],
                pbt: PopulationBasedTraining) -> bool:
    """Whether every alive (running) member is due (dead and paused ones never block);
    False with none alive."""
    alive = [m for m in _members(members) if m.alive]
    return bool(alive) and all(ready(m, pbt) for m in alive)


def _rng_to_dict(rng: random.Random) -> dict[str, Any]:
    version, internal, gauss_next = rng.getstate()
    return {"version": version, "state": list(internal), "gauss_next": gauss_next}


def _rng_from_dict(d: Mapping[str, Any]) -> random.Random:
    rng = random.Random()
    try:
        rng.setstate((d["version"], tuple(d["state"]), d["gauss_next"]))
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"bad PBT rng state: {e}") from None
    return rng


@dataclass
class PBTState:
    """The population, the PBT random stream, counters and each trial's last decision.

    `last_decision[trial_id]` is a JSON-able dict: "time", "candidates", "skipped"
    (donor id -> reason), "donor" (the donor taken, or None).
    """

    members: dict[str, Member] = field(default_factory=dict)
    rng: random.Random = field(default_factory=random.Random)
    num_perturbations: int = 0
    num_exploits: int = 0
    num_donor_skips: int = 0
    num_no_donor: int = 0
    last_decision: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def for_scheduler(cls, pbt: PopulationBasedTraining) -> PBTState:
        """An empty state whose random stream is seeded with `pbt.seed`."""
        return cls(rng=random.Random(pbt.seed))

    def report(self, trial_id: str, score: float | None, time: float,
               config: Mapping[str, Any] | None = None) -> Member:
        """Record a trial's newest result (adding the member if new); returns it."""
        member = self.members.get(trial_id)
        if member is None:
            member = self.members[trial_id] = Member(trial_id)
        member.score, member.time, member.alive, member.paused = score, time, True, False
        if config is not None:
            member.config = copy.deepcopy(dict(config))
        return member

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, the rng's exact state included."""
        return {
            "members": {k: m.to_dict() for k, m in self.members.items()},
            "rng": _rng_to_dict(self.rng),
            "num_perturbations": self.num_perturbations,
            "num_exploits": self.num_exploits,
            "num_donor_skips": self.num_donor_skips,
            "num_no_donor": self.num_no_donor,
            "last_decision": copy.deepcopy(self.last_decision),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PBTState:
        """The state `to_dict` described; the rng continues where it was."""
        args = _check_fields(cls, d)
        args["members"] = {k: Member.from_dict(m) for k, m in args.get("members", {}).items()}
        args["rng"] = _rng_from_dict(args.get("rng", {}))
        args["last_decision"] = copy.deepcopy(args.get("last_decision", {}))
        return cls(**args)


def decide(target_id: str, state: PBTState, pbt: PopulationBasedTraining) -> list[str]:
    """The donors to try for the target, best bet first, if it is due now; else [].

    A due member gets `last_perturbation_time = time` and counts as a perturbation; its
    candidates are empty unless it is in the bottom quantile.
    """
    member = state.members.get(target_id)
    if member is None:
        raise ConfigError(f"PBT has no trial {target_id!r}")
    if not member.alive or not ready(member, pbt):
        return []
    member.last_perturbation_time = member.time
    member.num_perturbations += 1
    state.num_perturbations += 1
    candidates = donor_candidates(target_id, state.members, pbt, state.rng)
    state.last_decision[target_id] = {
        "time": member.time, "candidates": list(candidates), "skipped": {}, "donor": None,
    }
    return candidates


def record_skip(state: PBTState, target_id: str, donor_id: str, reason: str) -> None:
    """Count a donor passed over (its checkpoint missing, unreadable or over-age) and
    note why in the target's last decision."""
    state.num_donor_skips += 1
    state.last_decision.setdefault(target_id, {"skipped": {}}).setdefault("skipped", {})[donor_id] = reason


def record_exploit(state: PBTState, target_id: str, donor_id: str, config: Mapping[str, Any]) -> None:
    """The target took the donor's checkpoint and `config` (the explored one)."""
    target = state.members[target_id]
    target.config = copy.deepcopy(dict(config))
    target.num_exploits += 1
    state.num_exploits += 1
    state.last_decision.setdefault(target_id, {})["donor"] = donor_id
