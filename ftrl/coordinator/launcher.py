"""Extension point for replacing bad nodes (DLRover's node relaunch idea).

When a node exceeds `max_node_failures` the coordinator excludes it (no new
actors; its actors move elsewhere) and calls `NodeLauncher.relaunch`. The
default launcher only logs. A cluster manager integration (SLURM requeue, a
cloud API, systemd restart of the worker unit) implements `relaunch` to bring
up a fresh node and returns True: the node's next registration (a new worker
session) then starts with a clean failure count. A worker that merely restarts
keeps its node's failures and exclusion.
"""

from __future__ import annotations

import logging
from typing import Protocol

from ftrl.coordinator.records import NodeRecord

log = logging.getLogger(__name__)


class NodeLauncher(Protocol):
    def relaunch(self, node: NodeRecord, reason: str) -> bool:
        """Start replacing `node`. Must not block: schedule the work and return True if a
        replacement is on its way (its next registration then starts with a clean
        failure count and is no longer EXCLUDED), False if nothing was done."""


class LoggingLauncher:
    """The default: says what should happen; relaunching is left to the operator."""

    def relaunch(self, node: NodeRecord, reason: str) -> bool:
        log.warning(
            "node %s (%s) excluded: %s. No node launcher is configured; restart its worker "
            "(`ftrl node readmit %s` lets it take actors again) or add a node",
            node.node_id,
            node.hostname or node.address,
            reason,
            node.node_id,
        )
        return False
