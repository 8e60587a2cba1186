"""Search spaces for `ftrl.tune`: grid axes, sampling domains and variant generation.

The names and semantics follow Ray Tune's: `grid_search` axes are expanded into their
cartesian product, domains (`uniform`, `loguniform`, `choice`, ...) are sampled once per
variant, and anything else is a constant copied into every variant.

A param space maps flat config keys ("lr", "entropy_coeff") to one of:

- a constant (any JSON-able value that is not a dict);
- a grid axis, `{"grid_search": [v1, v2, ...]}`;
- a `Domain` object, e.g. `loguniform(1e-4, 1e-2)`;
- a domain in TOML-friendly form, a single-key dict naming the domain and a list of its
  arguments: `{"loguniform": [1e-4, 1e-2]}`, `{"choice": ["a", "b"]}`, `{"qrandint": [1, 9, 2]}`;
- a domain in wire form, `{"__domain__": {"type": "loguniform", "low": ..., ...}}`.

Wire form (`param_space_to_wire` / `param_space_from_wire`): constants stay as they are,
grid axes stay `{"grid_search": [...]}`, domains become `{"__domain__": domain.to_dict()}`.
Converting to wire form and back gives `Domain` objects (TOML forms are normalized), and
converting that back to wire form again gives the same dict.

Numeric domains also bound PBT's perturbations: `Domain.project(value)` rounds a perturbed
value to the domain's grid (integers, multiples of q) and clips it to the domain's bounds.
"""

from __future__ import annotations

import copy
import itertools
import math
import random
from collections.abc import Collection, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar

from ftrl.config.fields import suggest
from ftrl.wire.errors import ConfigError

__all__ = [
    "MAX_VARIANTS",
    "Choice",
    "Domain",
    "LogRandInt",
    "LogUniform",
    "QLogUniform",
    "QRandInt",
    "QUniform",
    "RandInt",
    "Uniform",
    "check_param_space",
    "choice",
    "domain_from_dict",
    "domain_from_spec",
    "generate_variants",
    "grid_search",
    "is_grid",
    "lograndint",
    "loguniform",
    "param_space_from_wire",
    "param_space_to_wire",
    "qloguniform",
    "qrandint",
    "quniform",
    "randint",
    "uniform",
]

MAX_VARIANTS = 10_000
"""The most variants (grid combinations x num_samples) `generate_variants` makes."""

WIRE_KEY = "__domain__"
_EPS = 1e-9  # slack when deciding which multiples of q lie inside [low, high]


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _tidy(x: float) -> float:
    """Drop float noise from a product such as 3 * 0.1 (0.30000000000000004 -> 0.3)."""
    return float(f"{x:.15g}")


# --------------------------------------------------------------------------- domains


@dataclass(frozen=True)
class Domain:
    """A distribution one hyperparameter is sampled from.

    Subclasses are frozen dataclasses; they validate their arguments at construction
    (a bad one raises `ConfigError`). `is_numeric` domains have inclusive `bounds` and a
    `project` that PBT uses to keep a perturbed value inside the domain.
    """

    type_name: ClassVar[str] = ""
    is_numeric: ClassVar[bool] = True
    is_integer: ClassVar[bool] = False

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise `ConfigError` saying what is wrong with the arguments."""

    def sample(self, rng: random.Random) -> Any:
        """One value drawn from the domain with `rng`."""
        raise NotImplementedError

    @property
    def bounds(self) -> tuple[float, float]:
        """The smallest and largest value the domain yields (both inclusive)."""
        raise NotImplementedError

    def project(self, value: float) -> Any:
        """`value` moved into the domain: rounded to its grid, then clipped to `bounds`."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form: {"type": ..., plus one entry per argument}."""
        out: dict[str, Any] = {"type": self.type_name}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = list(v) if isinstance(v, tuple) else v
        return out


@dataclass(frozen=True)
class Choice(Domain):
    """One of `categories`, uniformly. Not numeric: PBT moves it like a list."""

    categories: tuple[Any, ...]

    type_name: ClassVar[str] = "choice"
    is_numeric: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if isinstance(self.categories, list):
            object.__setattr__(self, "categories", tuple(self.categories))
        super().__post_init__()

    def validate(self) -> None:
        if not isinstance(self.categories, tuple):
            raise ConfigError(f"choice needs a list of categories, got {self.categories!r}")
        if not self.categories:
            raise ConfigError("choice needs at least one category, got an empty list")

    def sample(self, rng: random.Random) -> Any:
        return copy.deepcopy(rng.choice(self.categories))


@dataclass(frozen=True)
class _Float(Domain):
    low: float
    high: float

    def validate(self) -> None:
        n = self.type_name
        for name in ("low", "high"):
            if not _is_number(getattr(self, name)):
                raise ConfigError(f"{n} {name} must be a finite number, got {getattr(self, name)!r}")
        if self.low > self.high:
            raise ConfigError(f"{n} low {self.low} > high {self.high}")

    @property
    def bounds(self) -> tuple[float, float]:
        return self.low, self.high

    def project(self, value: float) -> float:
        return float(min(max(value, self.low), self.high))


def _check_log(d: Any) -> None:
    if d.low <= 0:
        raise ConfigError(f"{d.type_name} bounds must be > 0, got low {d.low}")
    if not _is_number(d.base) or d.base <= 0 or d.base == 1:
        raise ConfigError(f"{d.type_name} base must be > 0 and != 1, got {d.base!r}")


def _check_q(d: Any) -> None:
    if not _is_number(d.q) or d.q <= 0:
        raise ConfigError(f"{d.type_name} q must be > 0, got {d.q!r}")
    if math.ceil(d.low / d.q - _EPS) > math.floor(d.high / d.q + _EPS):
        raise ConfigError(f"{d.type_name} has no multiple of q {d.q} in [{d.low}, {d.high}]")


def _log_sample(low: float, high: float, base: float, rng: random.Random) -> float:
    return base ** rng.uniform(math.log(low, base), math.log(high, base))


def _quantize(value: float, q: float, low: float, high: float) -> float:
    """The multiple of q nearest `value`, kept inside [low, high]."""
    k = round(value / q)
    k = min(max(k, math.ceil(low / q - _EPS)), math.floor(high / q + _EPS))
    return _tidy(k * q)


@dataclass(frozen=True)
class Uniform(_Float):
    """A float uniformly in [low, high]."""

    type_name: ClassVar[str] = "uniform"

    def sample(self, rng: random.Random) -> float:
        return self.project(rng.uniform(self.low, self.high))


@dataclass(frozen=True)
class LogUniform(_Float):
    """A float in [low, high], uniform in log space."""

    base: float = 10

    type_name: ClassVar[str] = "loguniform"

    def validate(self) -> None:
        super().validate()
        _check_log(self)

    def sample(self, rng: random.Random) -> float:
        return self.project(_log_sample(self.low, self.high, self.base, rng))


@dataclass(frozen=True)
class QUniform(_Float):
    """A multiple of q in [low, high], from a uniform draw rounded to q."""

    q: float

    type_name: ClassVar[str] = "quniform"

    def validate(self) -> None:
        super().validate()
        _check_q(self)

    def sample(self, rng: random.Random) -> float:
        return self.project(rng.uniform(self.low, self.high))

    def project(self, value: float) -> float:
        return _quantize(value, self.q, self.low, self.high)


@dataclass(frozen=True)
class QLogUniform(_Float):
    """A multiple of q in [low, high], from a log-uniform draw rounded to q."""

    q: float
    base: float = 10

    type_name: ClassVar[str] = "qloguniform"

    def validate(self) -> None:
        super().validate()
        _check_log(self)
        _check_q(self)

    def sample(self, rng: random.Random) -> float:
        return self.project(_log_sample(self.low, self.high, self.base, rng))

    def project(self, value: float) -> float:
        return _quantize(value, self.q, self.low, self.high)


@dataclass(frozen=True)
class _Int(Domain):
    low: int
    high: int

    is_integer: ClassVar[bool] = True
    high_inclusive: ClassVar[bool] = False

    def __post_init__(self) -> None:
        for f in fields(self):  # TOML writes 1e3 as a float: take integral floats
            v = getattr(self, f.name)
            if f.name != "base" and isinstance(v, float) and v.is_integer():
                object.__setattr__(self, f.name, int(v))
        super().__post_init__()

    def validate(self) -> None:
        n = self.type_name
        for name in ("low", "high"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise ConfigError(f"{n} {name} must be an integer, got {v!r}")
        if self.high_inclusive and self.low > self.high:
            raise ConfigError(f"{n} low {self.low} > high {self.high}")
        if not self.high_inclusive and self.low >= self.high:
            raise ConfigError(f"{n} low {self.low} >= high {self.high} (high is exclusive)")

    @property
    def bounds(self) -> tuple[int, int]:
        return self.low, self.high if self.high_inclusive else self.high - 1

    def project(self, value: float) -> int:
        lo, hi = self.bounds
        return int(min(max(round(value), lo), hi))


@dataclass(frozen=True)
class RandInt(_Int):
    """An integer uniformly in [low, high) (high exclusive, as in Tune)."""

    type_name: ClassVar[str] = "randint"

    def sample(self, rng: random.Random) -> int:
        return rng.randrange(self.low, self.high)


@dataclass(frozen=True)
class LogRandInt(_Int):
    """An integer in [low, high), uniform in log space (high exclusive, as in Tune)."""

    base: float = 10

    type_name: ClassVar[str] = "lograndint"

    def validate(self) -> None:
        super().validate()
        _check_log(self)

    def sample(self, rng: random.Random) -> int:
        return self.project(math.floor(_log_sample(self.low, self.high, self.base, rng)))


@dataclass(frozen=True)
class QRandInt(_Int):
    """A multiple of q in [low, high] (high inclusive, as in Tune)."""

    q: int = 1

    type_name: ClassVar[str] = "qrandint"
    high_inclusive: ClassVar[bool] = True

    def validate(self) -> None:
        super().validate()
        if not isinstance(self.q, int) or isinstance(self.q, bool) or self.q <= 0:
            raise ConfigError(f"qrandint q must be an integer > 0, got {self.q!r}")
        if -(-self.low // self.q) > self.high // self.q:
            raise ConfigError(f"qrandint has no multiple of q {self.q} in [{self.low}, {self.high}]")

    def sample(self, rng: random.Random) -> int:
        return self.project(rng.randint(self.low, self.high))

    def project(self, value: float) -> int:
        k = min(max(round(value / self.q), -(-self.low // self.q)), self.high // self.q)
        return int(k * self.q)


_DOMAINS: dict[str, type[Domain]] = {
    c.type_name: c
    for c in (Choice, Uniform, LogUniform, QUniform, QLogUniform, RandInt, LogRandInt, QRandInt)
}


def choice(categories: list[Any] | tuple[Any, ...]) -> Choice:
    """One of `categories`, uniformly."""
    return Choice(tuple(categories) if isinstance(categories, list) else categories)


def uniform(low: float, high: float) -> Uniform:
    """A float uniformly in [low, high]."""
    return Uniform(low, high)


def loguniform(low: float, high: float, base: float = 10) -> LogUniform:
    """A float in [low, high], uniform in log space; low must be > 0."""
    return LogUniform(low, high, base)


def quniform(low: float, high: float, q: float) -> QUniform:
    """A float uniformly in [low, high], rounded to a multiple of q."""
    return QUniform(low, high, q)


def qloguniform(low: float, high: float, q: float, base: float = 10) -> QLogUniform:
    """A float log-uniformly in [low, high], rounded to a multiple of q."""
    return QLogUniform(low, high, q, base)


def randint(low: int, high: int) -> RandInt:
    """An integer uniformly in [low, high): high is exclusive."""
    return RandInt(low, high)


def qrandint(low: int, high: int, q: int = 1) -> QRandInt:
    """An integer uniformly in [low, high], rounded to a multiple of q: high is inclusive."""
    return QRandInt(low, high, q)


def lograndint(low: int, high: int, base: float = 10) -> LogRandInt:
    """An integer log-uniformly in [low, high): high is exclusive; low must be > 0."""
    return LogRandInt(low, high, base)


def _arity(cls: type[Domain]) -> str:
    """The arguments of a domain, e.g. "[low, high, base=10]"."""
    args = (f.name if f.default is MISSING else f"{f.name}={f.default}" for f in fields(cls))
    return "[" + ", ".join(args) + "]"


def domain_from_dict(d: Mapping[str, Any]) -> Domain:
    """The domain a `Domain.to_dict()` describes."""
    if not isinstance(d, Mapping) or not isinstance(d.get("type"), str):
        raise ConfigError(f"a domain dict needs a 'type' field, got {d!r}")
    cls = _DOMAINS.get(d["type"])
    if cls is None:
        raise ConfigError(f"unknown domain type {d['type']!r}; known: {', '.join(_DOMAINS)}")
    args = {k: v for k, v in d.items() if k != "type"}
    names = {f.name for f in fields(cls)}
    if set(args) - names:
        raise ConfigError(f"{cls.type_name} has no argument(s) {sorted(set(args) - names)}")
    try:
        return cls(**args)
    except TypeError:
        raise ConfigError(f"{cls.type_name} takes {_arity(cls)}, got {sorted(args)}") from None


# --------------------------------------------------------------------------- grids and specs


def grid_search(values: list[Any]) -> dict[str, list[Any]]:
    """A grid axis: every variant is made once for each of `values`."""
    if not isinstance(values, list | tuple) or not values:
        raise ConfigError(f"grid_search needs a non-empty list of values, got {values!r}")
    return {"grid_search": list(values)}


def is_grid(value: Any) -> bool:
    """Whether `value` is a grid axis, `{"grid_search": [...]}`."""
    return isinstance(value, Mapping) and len(value) == 1 and "grid_search" in value


def _forms() -> str:
    return ", ".join(
        f"{{{n!r}: {'[values]' if n == 'choice' else _arity(c)}}}" for n, c in _DOMAINS.items()
    ) + ", {'grid_search': [values]}"


def domain_from_spec(value: Any) -> Any:
    """`value` with a TOML-form or wire-form domain turned into a `Domain`.

    Domain objects and constants come back as they are; a grid axis comes back as a
    checked copy. Any other dict raises `ConfigError` listing the known forms.
    """
    if isinstance(value, Domain):
        value.validate()
        return value
    if not isinstance(value, Mapping):
        return value
    if is_grid(value):
        return grid_search(value["grid_search"])
    if len(value) == 1:
        (name, args), = value.items()
        if name == WIRE_KEY:
            return domain_from_dict(args)
        cls = _DOMAINS.get(name)
        if cls is not None:
            if not isinstance(args, list | tuple):
                raise ConfigError(f"{{{name!r}: ...}} takes a list {_arity(cls)}, got {args!r}")
            if cls is Choice:
                return Choice(tuple(args))
            try:
                return cls(*args)
            except TypeError:
                raise ConfigError(
                    f"{{{name!r}: ...}} takes {_arity(cls)}, got {len(args)} values"
                ) from None
    raise ConfigError(
        f"{dict(value)!r} is not a search-space form (param_space keys are flat config keys, "
        f"and a dict value must be one of {_forms()})"
    )


def _normalize(param_space: Mapping[str, Any]) -> dict[str, Any]:
    """The space with every value through `domain_from_spec`; errors name the key."""
    if not isinstance(param_space, Mapping):
        raise ConfigError(f"param_space must be a table of config keys, got {param_space!r}")
    out: dict[str, Any] = {}
    for key, value in param_space.items():
        if not isinstance(key, str):
            raise ConfigError(f"param_space keys are config key names, got {key!r}")
        try:
            out[key] = domain_from_spec(value)
        except ConfigError as e:
            raise ConfigError(f"param_space[{key!r}]: {e}") from None
    return out


def check_param_space(param_space: Mapping[str, Any], valid_keys: Collection[str]) -> None:
    """Raise `ConfigError` naming the key if `param_space` has an unknown key or bad value."""
    if isinstance(param_space, Mapping):
        for key in param_space:
            if isinstance(key, str) and key not in valid_keys:
                raise ConfigError(f"param_space[{key!r}]: not a config key{suggest(key, valid_keys)}")
    _normalize(param_space)


def _to_wire(value: Any) -> Any:
    if isinstance(value, Domain):
        return {WIRE_KEY: value.to_dict()}
    return copy.deepcopy(value)


def param_space_to_wire(param_space: Mapping[str, Any]) -> dict[str, Any]:
    """JSON-able form: constants as they are, grids as grids, domains `{"__domain__": {...}}`."""
    return {k: _to_wire(v) for k, v in _normalize(param_space).items()}


def param_space_from_wire(d: Mapping[str, Any]) -> dict[str, Any]:
    """The param space `param_space_to_wire` made `d` from (domains as `Domain` objects)."""
    return {k: copy.deepcopy(v) for k, v in _normalize(d).items()}


# --------------------------------------------------------------------------- variants


def generate_variants(
    param_space: Mapping[str, Any], num_samples: int, seed: int | None = None
) -> list[dict[str, Any]]:
    """The trial configs of a param space, as Tune's BasicVariantGenerator makes them.

    The cartesian product of the grid axes (the first key varies slowest) is repeated
    `num_samples` times; every variant samples each domain anew from one
    `random.Random(seed)`, in key order, so a seed gives the same variants every time.
    """
    if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples < 1:
        raise ConfigError(f"num_samples must be an integer >= 1, got {num_samples!r}")
    space = _normalize(param_space)
    grid_keys = [k for k, v in space.items() if is_grid(v)]
    axes = [space[k]["grid_search"] for k in grid_keys]
    combos = math.prod(len(a) for a in axes)
    if combos * num_samples > MAX_VARIANTS:
        raise ConfigError(
            f"param_space: {combos} grid combinations x num_samples {num_samples} = "
            f"{combos * num_samples} variants, more than the limit of {MAX_VARIANTS}"
        )
    rng = random.Random(seed)
    variants: list[dict[str, Any]] = []
    for _ in range(num_samples):
        for combo in itertools.product(*axes):
            picked = dict(zip(grid_keys, combo, strict=True))
            variant: dict[str, Any] = {}
            for key, value in space.items():
                if key in picked:
                    variant[key] = copy.deepcopy(picked[key])
                elif isinstance(value, Domain):
                    variant[key] = value.sample(rng)
                else:
                    variant[key] = copy.deepcopy(value)
            variants.append(variant)
    return variants
