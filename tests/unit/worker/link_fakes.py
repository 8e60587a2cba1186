"""What the worker's link tests share: a `CoordinatorLink` of a one-slot node with no
actors, on a fake stub and clock of the test's own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ftrl.wire import ftrl_pb2 as pb
from ftrl.worker.lease import Lease
from ftrl.worker.link import CoordinatorLink
from ftrl.worker.options import NodeIdentity, WorkerOptions
from ftrl.worker.outbox import Outbox


class NoActors:
    """The node's actors as the link sees them: none."""

    def count(self) -> int:
        return 0

    def running(self, epoch: int) -> list[pb.RunningActor]:
        return []

    def on_start(self, start: pb.StartActor) -> None:
        raise AssertionError("no command expected")

    def on_stop(self, stop: pb.StopActor, report: bool = True) -> None:
        raise AssertionError("no command expected")


def make_link(stub: Any, awake: Any, on_end: Callable[[BaseException | None], None]) -> CoordinatorLink:
    """A link of node n0 (no actors) to the coordinator `stub`, its watchdog on `awake`."""
    node = NodeIdentity(node_id="n0", session_id="s0", address="127.0.0.1", slots=1, resources={})
    return CoordinatorLink(node, WorkerOptions(coordinator="127.0.0.1:1"), stub, (), awake,
                           Lease(), Outbox(), NoActors(), on_heartbeat_timeout=lambda s: None, on_end=on_end)
