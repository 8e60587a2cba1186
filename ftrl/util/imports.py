"""Import an object named by an import path "package.module:Name".

The one helper for class paths of actors, environment creators and algorithms. A
nested name ("module:Outer.Inner") is followed attribute by attribute. Errors name the
path and what is wrong, with plain builtin types (an actor's start failure reports them
by type name): a malformed path is a ValueError; a module that cannot be imported or a
missing attribute is an ImportError; `import_class` of a non-class is a TypeError.

Paths that persist (actor class paths in a coordinator's job and actor records, the
learner class in a learner actor's kwargs, env creators in users' job files) outlive a
move of the code: `MOVED_MODULES` maps the modules of the layout before the rl/
restructure (ftrl 36f3c3f and earlier) to where their objects live now, so a state dir
or a job file written then still loads.
"""

from __future__ import annotations

import importlib
from typing import Any

#: module of an old import path -> where its objects are now (none of the old modules
#: defines anything any more: ftrl.rl.driver is a package whose modules hold the code)
MOVED_MODULES = {
    "ftrl.rl.driver": "ftrl.rl.driver.actor",  # a package now: AlgorithmDriver is in .actor
    "ftrl.rl.env_runner": "ftrl.rl.sampling.env_runner",
    "ftrl.rl.learner_actor": "ftrl.rl.learning.learner_actor",
    "ftrl.rl.learner": "ftrl.rl.algorithms.ppo",  # PPOLearner
    "ftrl.rl.testing_envs": "ftrl.testing.envs",
}


def split_import_path(path: str) -> tuple[str, list[str]]:
    """("package.module", ["Outer", "Inner"]) for "package.module:Outer.Inner"."""
    if not isinstance(path, str):
        raise ValueError(f"import path must be a str 'package.module:Name', got {path!r}")
    module_name, sep, qualname = path.partition(":")
    parts = qualname.split(".")
    if (
        not sep
        or not all(p.isidentifier() for p in module_name.split("."))
        or not all(p.isidentifier() for p in parts)
    ):
        raise ValueError(f"{path!r} is not an import path of the form 'package.module:Name'")
    return module_name, parts


def import_object(path: str) -> Any:
    """The object that "package.module:Name" (or "...:Outer.Inner") names."""
    module_name, parts = split_import_path(path)
    module_name = MOVED_MODULES.get(module_name, module_name)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise ImportError(f"cannot import module {module_name!r} of {path!r}: {e}") from e
    for i, part in enumerate(parts):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            where = module_name if i == 0 else f"{module_name}:{'.'.join(parts[:i])}"
            raise ImportError(f"{where!r} has no attribute {part!r} (import path {path!r})") from None
    return obj



def import_class(path: str) -> type:
    """The class that "package.module:Class" names; TypeError if it is not a class."""
    obj = import_object(path)
    if not isinstance(obj, type):
        raise TypeError(f"{path!r} is a {type(obj).__name__}, not a class")
    return obj
