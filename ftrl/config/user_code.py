"""User code a config names by import path ("pkg.mod:Name": an env creator, a custom
model, callbacks, a PBT explore function), imported where it is used, with one
ConfigError wording for every key. Nothing is unpickled: the code is the user's module.

    cls = import_user_class("callbacks_class", path, Callbacks, "a subclass of ftrl.Callbacks")
"""

from __future__ import annotations

from typing import Any

from ftrl.util.imports import import_object, split_import_path
from ftrl.wire.errors import ConfigError


def import_user_code(key: str, path: Any) -> Any:
    """The object `path` names; ConfigError naming `key` when `path` is no import path,
    does not import, or its module raises while importing."""
    try:
        split_import_path(path)
    except ValueError:
        raise ConfigError(f"{key} must be an import path 'pkg.mod:Name', got {path!r}") from None
    try:
        return import_object(path)
    except ImportError as e:
        raise ConfigError(f"{key} {path!r} does not import: {e}") from None
    except Exception as e:  # the user's module raised while importing
        raise ConfigError(f"{key} {path!r}: importing it raised {type(e).__name__}: {e}") from None


def import_user_class(key: str, path: Any, base: type, what: str) -> type:
    """The class `path` names, a subclass of `base`; ConfigError naming `key` (and saying
    it must be `what`) otherwise."""
    target = import_user_code(key, path)
    if not (isinstance(target, type) and issubclass(target, base)):
        raise ConfigError(f"{key} {path!r} is a {type(target).__name__}, not {what}")
    return target
