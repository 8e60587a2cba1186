"""ftrl: a fault-tolerant runtime for distributed reinforcement learning, without Ray.

    import ftrl
    client = ftrl.Client("127.0.0.1:6380")
    counter = client.create_actor("mypkg.counter:Counter", name="c", max_restarts=-1)
    counter.call("incr", 2)

    job = client.submit("examples/cartpole_ppo.toml", job_id="cp")   # or a PPOConfig, JobSpec, dict
    for row in client.results(job):                                  # until the job ends
        print(row["iteration"], row["episode_return_mean"])
"""

from __future__ import annotations

import os as _os
from typing import Any

# Actor hosts are started with fork+exec from threads that use gRPC; gRPC's fork
# handlers are not needed for that and only log noise.
_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

__version__ = "0.1.0"

from ftrl.client import (
    FINAL_JOB_STAGES,
    JOB_STAGES,
    ActorHandle,
    AsyncActorHandle,
    AsyncClient,
    Client,
    RuntimeContext,
    get_runtime_context,
)
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


def __getattr__(name: str) -> Any:
    # RL names load lazily so `import ftrl` stays light (no torch) for clients.
    if name in ("PPOConfig", "AlgorithmConfig", "JobSpec", "StopCriteria", "load_job"):
        from ftrl import config

        return getattr(config, name)
    if name == "local_cluster":
        from ftrl.client.cluster import local_cluster

        return local_cluster
    raise AttributeError(f"module 'ftrl' has no attribute {name!r}")


__all__ = [
    "ActorDiedError",
    "ActorError",
    "ActorHandle",
    "ActorStartError",
    "ActorUnavailableError",
    "AlreadyExistsError",
    "AsyncActorHandle",
    "AsyncClient",
    "Client",
    "ConfigError",
    "FINAL_JOB_STAGES",
    "FtrlError",
    "FtrlTimeoutError",
    "InvalidArgumentError",
    "JOB_STAGES",
    "MethodNotFoundError",
    "NotFoundError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "RuntimeContext",
    "StaleIncarnationError",
    "UnauthenticatedError",
    "get_runtime_context",
]
