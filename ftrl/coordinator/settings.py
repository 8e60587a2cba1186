"""The coordinator's policy knobs (`ControllerConfig`) and the shapes of the hooks its
parts are handed: how a message reaches a node (`Send`) and what time it is (`Clock`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ftrl.util.restart_policy import RestartPolicy
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.errors import InvalidArgumentError
from ftrl.wire.limits import MAX_ACTORS

#: Put a message on a node's stream: (node id, message) -> whether it went out.
Send = Callable[[str, pb.CoordinatorMessage], bool]
#: Monotonic seconds.
Clock = Callable[[], float]


@dataclass
class ControllerConfig:
    """Coordinator policy knobs."""

    heartbeat_interval_s: float = 1.0
    heartbeat_timeout_s: float = 5.0
    max_node_failures: int = 100  # -1: never exclude a node
    restart_backoff_base_s: float = 0.1
    restart_backoff_cap_s: float = 2.0
    quick_crash_s: float = 1.0  # a death sooner than this after start counts as a crash loop
    adopt_unknown_actors: bool = True  # nothing restored: trust what workers report
    lost_node_retention_s: float = 3600.0  # forget an empty LOST node after this long
    max_actors: int = MAX_ACTORS
    node_failure_window_s: float = 3600.0  # max_node_failures counts failures this recent
    restart_grace_s: float | None = None  # after a restart, wait up to this long for workers (None: max(10 s, 2 timeouts))
    job_unhealthy_timeout_s: float = 300.0  # a running job with no live runner this long FAILS

    @property
    def restart_policy(self) -> RestartPolicy:
        return RestartPolicy(self.restart_backoff_base_s, self.restart_backoff_cap_s, self.quick_crash_s)

    @property
    def grace_s(self) -> float:
        """How long a restarted coordinator waits for its workers before placing anything."""
        if self.restart_grace_s is None:
            return max(10.0, 2 * self.heartbeat_timeout_s)
        return self.restart_grace_s

    def validate(self) -> None:
        if not (0 < self.heartbeat_interval_s < self.heartbeat_timeout_s):
            raise InvalidArgumentError(
                "need 0 < heartbeat interval < heartbeat timeout, got "
                f"{self.heartbeat_interval_s} and {self.heartbeat_timeout_s}"
            )
        if self.node_failure_window_s <= 0:
            raise InvalidArgumentError("node_failure_window_s must be > 0")
        try:
            self.restart_policy.validate()
        except ValueError as e:
            raise InvalidArgumentError(str(e)) from None
