"""The field machinery of every config section: `option(default, doc, check=...)`, the
per-field checks, type checks from the annotations, `check_value`, `describe_section`,
and `keys_of`, which gives a builder method its section's keys as its signature.

One definition per field: a key is one dataclass field written with `option(...)`,
its facts (how it may change while a job trains, whether the learners of a mesh must
agree on it, whether a resume may change it: ftrl/config/keys.py) included; everything
else (builder signatures, TOML tables, to/from dict, `--set`, checks, the `python -m
ftrl.config` listing, the live keys, the mesh's config hash, the resume check, every
"did you mean" hint: `suggest`) derives from it. Imports no torch.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import inspect
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field
from typing import Any, TypeVar, Union

from ftrl.config.keys import FACTS, Mutability, declared, section_facts
from ftrl.wire.errors import ConfigError


class _Unset:
    """The default of every builder keyword: "leave this key as it is"."""

    def __repr__(self) -> str:
        return "<unchanged>"


NOT_SET: Any = _Unset()

#: A per-field check: called as check(name, value) with a value of the field's type
#: (never None); raises ConfigError.
Check = Callable[[str, Any], None]

# --------------------------------------------------------------------------- per-field checks


def positive_int(name: str, value: Any) -> None:
    """Check: an int > 0."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{name} must be a positive int, got {value!r}")


def non_negative_int(name: str, value: Any) -> None:
    """Check: an int >= 0."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{name} must be an int >= 0, got {value!r}")


def positive_float(name: str, value: Any) -> None:
    """Check: a finite number > 0."""
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not value > 0
        or not math.isfinite(value)
    ):
        raise ConfigError(f"{name} must be a positive finite number, got {value!r}")


def non_negative_float(name: str, value: Any) -> None:
    """Check: a finite number >= 0."""
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not value >= 0
        or not math.isfinite(value)
    ):
        raise ConfigError(f"{name} must be >= 0, got {value!r}")


def unit_interval(name: str, value: Any) -> None:
    """Check: a number in [0, 1]."""
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{name} must be in [0, 1], got {value}")


def one_of(*choices: str) -> Check:
    """Check: one of `choices` (an error suggests the nearest)."""

    def check(name: str, value: Any) -> None:
        if value not in choices:
            listed = " or ".join(repr(c) for c in choices)
            raise ConfigError(
                f"{name} must be {listed}, got {value!r}{suggest(str(value), list(choices))}"
            )

    check.__doc__ = f"one of {', '.join(choices)}"
    return check


def check_schedule(name: str, schedule: list | None) -> None:
    """A schedule is None or a non-empty list of [env_step, value] with rising steps."""
    if schedule is None:
        return
    if not schedule:
        raise ConfigError(f"{name} must not be empty (use None for a constant)")
    last = -math.inf
    for point in schedule:
        if (
            not isinstance(point, (list, tuple))
            or len(point) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in point)
        ):
            raise ConfigError(f"{name} entries must be [env_step, value] pairs, got {point!r}")
        if point[0] < last:
            raise ConfigError(f"{name} env steps must not decrease: {schedule!r}")
        if point[1] < 0:
            raise ConfigError(f"{name} values must be >= 0: {schedule!r}")
        last = point[0]


def option(default: Any, doc: str, *, check: Check | None = None, schema: type | None = None,
           change: Mutability | None = None, mesh: bool | None = None, fixed_on_resume: bool | None = None,
           schedules: str | None = None) -> Any:
    """One config field: its default, a one-line doc, an optional per-field check, and
    what the rest of ftrl must know about the key (ftrl/config/keys.py).

    `check(name, value)` runs on every non-None value (after the type check that the
    annotation implies) and raises ConfigError. `schema` names a dataclass whose fields
    are the allowed keys of a dict-valued field (as `model`). List and dict defaults are
    copied per instance (ruff's RUF009 cannot see that: hence its noqa on such fields).

    The key's facts: `change` (LIVE, rebuild(Part...) or NEVER, the default: how it may
    change while a job trains), `mesh` (the learners of one mesh must agree on it; default:
    the section's `mesh_by_default`), `fixed_on_resume` (a resume may not change it) and
    `schedules` (a schedule key: the live key it sets while it is set). A field that
    redefines a base section's field keeps the facts it does not restate.
    """
    metadata = {"doc": doc, "check": check, "schema": schema,
                FACTS: declared(change, mesh, fixed_on_resume, schedules)}
    if isinstance(default, (list, dict)):
        return field(default_factory=functools.partial(copy.deepcopy, default), metadata=metadata)
    return field(default=default, metadata=metadata)


# --------------------------------------------------------------------------- type checking


def _type_ok(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if tp is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(_type_ok(value, arg) for arg in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if tp is dict or origin is dict:
        return isinstance(value, Mapping)
    if tp is list or origin is list:
        return isinstance(value, (list, tuple))
    return isinstance(value, tp)


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "None"
    return getattr(tp, "__name__", str(tp))


def suggest(key: object, valid: Iterable[object]) -> str:
    """"; did you mean 'x'?" naming the nearest of `valid` to `key` ("" when none is near):
    the hint of every unknown config key, [tune] key, scheduler field or choice."""
    close = difflib.get_close_matches(str(key), [str(v) for v in valid], n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else ""


def _coerce(value: Any, tp: Any) -> Any:
    """Light coercion: ints where floats are expected, tuples to lists, Mappings to dicts."""
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, Mapping) and not isinstance(value, dict):
        value = dict(value)
    hints = [tp, *typing.get_args(tp)]
    if float in hints and int not in hints and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


@functools.cache
def fields_of(cls: type) -> dict[str, tuple[Any, dataclasses.Field]]:
    """A section dataclass's keys: name -> (type, dataclasses.Field with metadata doc, check)."""
    hints = typing.get_type_hints(cls)
    return {f.name: (hints[f.name], f) for f in dataclasses.fields(cls)}


def field_doc(cls: type, key: str) -> str:
    """The one-line doc of key `key` of section `cls`."""
    return fields_of(cls)[key][1].metadata.get("doc", "")


def check_value(cls: type, key: str, value: Any, where: str, prefix: str = "") -> Any:
    """`value` for key `key` of `cls`, coerced and checked against the field's type, its
    schema and its check; an unknown key names the nearest valid one. Raises ConfigError."""
    fields = fields_of(cls)
    if key not in fields:
        raise ConfigError(f"unknown key {key!r} in {where}{suggest(key, list(fields))}")
    tp, f = fields[key]
    value = _coerce(value, tp)
    if not _type_ok(value, tp):
        raise ConfigError(
            f"{prefix}{key} must be {_type_name(tp)}, got {type(value).__name__} {value!r}"
        )
    schema = f.metadata.get("schema")
    if schema is not None and value is not None:
        value = {k: check_value(schema, k, v, where=key, prefix=f"{key} ") for k, v in value.items()}
    check = f.metadata.get("check")
    if check is not None and value is not None:
        check(prefix + key, value)
    return value


def _default_text(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return repr(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return repr(f.default_factory())
    return "required"


def describe_section(cls: type, indent: str = "  ", facts: bool = False) -> list[str]:
    """One line per key of `cls`: `name: type = default  doc`, and with `facts` what may
    change it (ftrl/config/keys.py's `KeyFacts.summary`) in brackets after the doc."""
    lines = []
    key_facts = section_facts(cls) if facts else {}
    for key, (tp, f) in fields_of(cls).items():
        tag = f"  [{key_facts[key].summary()}]" if key in key_facts else ""
        lines.append(f"{indent}{key}: {_type_name(tp)} = {_default_text(f)}\n{indent}    "
                     f"{f.metadata.get('doc', '')}{tag}")
    return lines


_F = TypeVar("_F", bound=Callable[..., Any])


def keys_of(section_cls: type) -> Callable[[_F], _F]:
    """Give a builder method (`def m(self, **kwargs)`) the section's keys as its run-time
    signature (help(), IPython, Jupyter completion) and their docs in its docstring."""

    def wrap(fn: _F) -> _F:
        sig = inspect.signature(fn)
        lead = [
            p for p in sig.parameters.values() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        ]
        names = {p.name for p in lead}
        keys = [
            inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=NOT_SET, annotation=tp)
            for key, (tp, _) in fields_of(section_cls).items()
            if key not in names
        ]
        fn.__signature__ = sig.replace(parameters=lead + keys)  # type: ignore[attr-defined]
        doc = inspect.cleandoc(fn.__doc__ or "")
        fn.__doc__ = doc + "\n\nKeys (unset ones stay as they are):\n" + "\n".join(
            describe_section(section_cls)
        )
        return fn

    return wrap
