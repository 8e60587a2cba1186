"""ftrl: a fault-tolerant runtime for distributed reinforcement learning, without Ray.

    import ftrl
    client = ftrl.Client("127.0.0.1:6380")
    counter = client.create_actor("mypkg.counter:Counter", name="c", max_restarts=-1)
    counter.call("incr", 2)

    job = client.submit("examples/cartpole_ppo.toml", job_id="cp")   # or a PPOConfig, JobSpec, dict
    for row in client.results(job):                                  # until the job ends
        print(row["iteration"], row["episode_return_mean"])

`import ftrl` is light: it loads no grpc, numpy or torch. Every public name is imported
on first use (PEP 562 module `__getattr__`), so actor hosts, sub-env children and the
`ftrl` CLI pay only for what they touch.
"""

from __future__ import annotations

import os as _os
from typing import TYPE_CHECKING, Any

from ftrl._version import __version__ as __version__

# Actor hosts are started with fork+exec from threads that use gRPC; gRPC's fork
# handlers are not needed for that and only log noise.
_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

#: Public name -> the module that defines it (imported on first access). `Algorithm`
#: (torch) and `EnvContext` (gymnasium) are reachable as `ftrl.Algorithm` and
#: `ftrl.EnvContext` but left out of `__all__`, so `from ftrl import *` stays light.
_LAZY: dict[str, str] = {
    "ActorHandle": "ftrl.client.client",
    "Client": "ftrl.client.client",
    "AsyncActorHandle": "ftrl.client.aio",
    "AsyncClient": "ftrl.client.aio",
    "RuntimeContext": "ftrl.client.context",
    "get_runtime_context": "ftrl.client.context",
    "JOB_STAGES": "ftrl.client.jobs",
    "local_cluster": "ftrl.client.cluster",
    "PPOConfig": "ftrl.config",
    "IMPALAConfig": "ftrl.config",
    "APPOConfig": "ftrl.config",
    "AlgorithmConfig": "ftrl.config",
    "JobSpec": "ftrl.config",
    "StopCriteria": "ftrl.config",
    "load_job": "ftrl.config",
    "Callbacks": "ftrl.rl.callbacks",
    "EnvContext": "ftrl.rl.sampling.env_factory",
    "Algorithm": "ftrl.rl.driver.algorithm",
    "Tuner": "ftrl.tune.tuner",
    "TuneConfig": "ftrl.tune.tuner",
    "RunConfig": "ftrl.tune.tuner",
    "FailureConfig": "ftrl.tune.tuner",
    **{name: "ftrl.wire.errors" for name in (
        "ActorDiedError", "ActorError", "ActorStartError", "ActorUnavailableError",
        "AlreadyExistsError", "ConfigError", "FtrlError", "FtrlTimeoutError",
        "InvalidArgumentError", "MethodNotFoundError", "NotFoundError",
        "PermissionDeniedError", "ResourceExhaustedError", "StaleIncarnationError",
        "UnauthenticatedError",
    )},
}
#: Public names defined under another name in their module.
_RENAMED: dict[str, tuple[str, str]] = {"FINAL_JOB_STAGES": ("ftrl.client.jobs", "FINAL_STAGES")}
#: Subpackages reachable as attributes (`ftrl.client.cluster` after `import ftrl`).
_SUBMODULES = frozenset({"cli", "client", "config", "coordinator", "launch", "rl", "testing", "tune", "util", "wire", "worker"})


def __getattr__(name: str) -> Any:
    """Import a public name on first use and keep it in the module's namespace."""
    import importlib

    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _RENAMED:
        module, attr = _RENAMED[name]
        value = getattr(importlib.import_module(module), attr)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"ftrl.{name}")
    else:
        raise AttributeError(f"module 'ftrl' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_RENAMED, *_SUBMODULES})


if TYPE_CHECKING:  # what type checkers and IDEs see; nothing of it runs
    from ftrl.client.aio import AsyncActorHandle, AsyncClient
    from ftrl.client.client import ActorHandle, Client
    from ftrl.client.cluster import local_cluster  # noqa: F401
    from ftrl.client.context import RuntimeContext, get_runtime_context
    from ftrl.client.jobs import FINAL_STAGES as FINAL_JOB_STAGES
    from ftrl.client.jobs import JOB_STAGES
    from ftrl.config import (  # noqa: F401
        AlgorithmConfig,
        APPOConfig,
        IMPALAConfig,
        JobSpec,
        PPOConfig,
        StopCriteria,
        load_job,
    )
    from ftrl.rl.callbacks import Callbacks
    from ftrl.rl.driver.algorithm import Algorithm  # noqa: F401  (not in __all__: torch)
    from ftrl.rl.sampling.env_factory import EnvContext  # noqa: F401  (not in __all__: gymnasium)
    from ftrl.tune.tuner import FailureConfig, RunConfig, TuneConfig, Tuner
    from ftrl.wire.errors import (
        ActorDiedError,
        ActorError,
        ActorStartError,
        ActorUnavailableError,
        AlreadyExistsError,
        ConfigError,
        FtrlError,
        FtrlTimeoutError,
        InvalidArgumentError,
        MethodNotFoundError,
        NotFoundError,
        PermissionDeniedError,
        ResourceExhaustedError,
        StaleIncarnationError,
        UnauthenticatedError,
    )

__all__ = [
    "ActorDiedError",
    "ActorError",
    "ActorHandle",
    "ActorStartError",
    "ActorUnavailableError",
    "AlreadyExistsError",
    "AsyncActorHandle",
    "AsyncClient",
    "Callbacks",
    "Client",
    "ConfigError",
    "FINAL_JOB_STAGES",
    "FailureConfig",
    "FtrlError",
    "FtrlTimeoutError",
    "InvalidArgumentError",
    "JOB_STAGES",
    "MethodNotFoundError",
    "NotFoundError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "RunConfig",
    "RuntimeContext",
    "StaleIncarnationError",
    "TuneConfig",
    "Tuner",
    "UnauthenticatedError",
    "get_runtime_context",
]
