"""Extension point for replacing bad nodes (DLRover's node relaunch idea).

When a node exceeds `max_node_failures` the coordinator excludes it (no new
actors; its actors move elsewhere) and calls `NodeLauncher.relaunch`. The
default launcher only logs. A cluster manager integration (SLURM requeue, a
cloud API, systemd restart of the worker unit) implements `relaunch` to bring
up a fresh node; a worker that registers again under a new session counts as
relaunched and starts with a clean failure count.
"""

from __future__ import annotations

import logging
from typing import Protocol

from ftrl.coordinator.records import NodeRecord

log = logging.getLogger(__name__)


class NodeLauncher(Protocol):
    def relaunch(self, node: NodeRecord, reason: str) -> None:
        """Start replacing `node`. Must not block: schedule the work and return."""


class LoggingLauncher:
    """The default: says what should happen; relaunching is left to the operator."""

    def relaunch(self, node: NodeRecord, reason: str) -> None:
        log.warning(
            "node %s (%s) excluded: %s. No node launcher is configured; restart its worker "
            "(a new worker session resets the failure count) or add a node",
            node.node_id,
            node.hostname or node.address,
            reason,
        )
