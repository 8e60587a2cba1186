"""`Lease`: the coordinator's leave for this node to restart actors in place, and its rule.

The coordinator link (link.py) renews the lease with each acknowledged heartbeat: the
heartbeat's send time plus 80% of the heartbeat timeout. It always runs out before the
coordinator can declare this node lost, so a partitioned node never restarts an actor
the coordinator is moving elsewhere. The restart policy comes with every registration,
so that the coordinator and the node apply one rule. The actors' lifecycle
(lifecycle.py) reads both before it restarts an actor in place.
"""

from __future__ import annotations

import logging
import time

from ftrl.util.restart_policy import RestartPolicy

log = logging.getLogger("ftrl.worker.agent")

LEASE_FRACTION = 0.8


class Lease:
    """Until when this node may restart actors in place (`valid()`), under which policy."""

    def __init__(self) -> None:
        self.until = 0.0  # time.monotonic(): restarts in place are allowed until then
        self.restart_policy = RestartPolicy()  # the coordinator's, sent at every registration

    def valid(self) -> bool:
        """Whether the lease from the last acknowledged heartbeat still holds."""
        return time.monotonic() < self.until

    def renew(self, sent_at: float, heartbeat_timeout_s: float) -> None:
        """A heartbeat written at `sent_at` (monotonic) was acknowledged."""
        self.until = sent_at + LEASE_FRACTION * heartbeat_timeout_s

    def follow(self, policy: RestartPolicy) -> None:
        """The restart policy a registration brought (logged when it changes)."""
        if policy != self.restart_policy:
            log.info("restart policy from the coordinator: %s", policy)
        self.restart_policy = policy
