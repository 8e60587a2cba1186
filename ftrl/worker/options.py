"""`WorkerOptions`: what `ftrl worker` is told (its command line, as a dataclass), and
`NodeIdentity`: who the node is, as the coordinator and the actors are told."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class WorkerOptions:
    """The settings of one node agent (`ftrl worker`)."""

    coordinator: str
    node_id: str | None = None
    slots: int = 0  # 0: number of CPUs
    gpus: int = 0
    resources: dict[str, float] = field(default_factory=dict)
    address: str | None = None  # host actors listen on and advertise
    actor_hang_timeout_s: float = 10.0
    actor_start_timeout_s: float = 300.0
    spares: int = 1
    preload: str = ""
    log_dir: str | None = None
    log_level: str = "INFO"
    drain_timeout_s: float = 60.0  # SIGTERM: drain for at most this long, then stop at once
    connect_timeout_s: float = 120.0  # give up when the first registration fails this long
    log_max_bytes: int = 50 << 20  # an actor's log is rotated past this size
    log_backups: int = 3  # rotated files kept per actor


@dataclass(frozen=True)
class NodeIdentity:
    """Who this node agent is (resolved from its options when it starts)."""

    node_id: str
    session_id: str  # this run of the agent: a restarted worker registers anew
    address: str  # actors listen on it; the coordinator is told it
    slots: int
    resources: dict[str, float]
