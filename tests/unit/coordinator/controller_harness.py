"""A Controller driven without a network: a fake clock and a fake `send`."""

from __future__ import annotations

from dataclasses import dataclass, field

from ftrl import __version__
from ftrl.coordinator.controller import Controller, ControllerConfig
from ftrl.coordinator.records import NodeRecord
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb


@dataclass
class FakeLauncher:
    calls: list[tuple[str, str]] = field(default_factory=list)
    relaunches: bool = False  # True: acts like a cluster manager that replaces the node

    def relaunch(self, node: NodeRecord, reason: str) -> bool:
        self.calls.append((node.node_id, reason))
        return self.relaunches


class Harness:
    """Owns a Controller; records what it sends to each node and the events it emits."""

    def __init__(self, store=None, start_time: float = 1000.0, **config) -> None:
        config.setdefault("heartbeat_interval_s", 1.0)
        config.setdefault("heartbeat_timeout_s", 5.0)
        self.now = start_time
        self.sent: list[tuple[str, pb.CoordinatorMessage]] = []
        self.links: set[str] = set()  # nodes with an open stream (send succeeds)
        self.fenced: list[str] = []
        self.sessions: dict[str, str] = {}
        self.epochs: dict[str, int] = {}
        self.launcher = FakeLauncher()
        self.c = Controller(ControllerConfig(**config), send=self._send, launcher=self.launcher,
                            clock=lambda: self.now, store=store)
        self.c.on_node_fenced = self._fence

    # ------------------------------------------------------------ plumbing

    def _send(self, node_id: str, msg: pb.CoordinatorMessage) -> bool:
        if node_id not in self.links:
            return False
        self.sent.append((node_id, msg))
        return True

    def _fence(self, node_id: str) -> None:
        self.fenced.append(node_id)
        self.links.discard(node_id)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.c.tick()

    # ------------------------------------------------------------ nodes

    def register(self, node_id: str, cpu: float = 2, gpu: float = 0, session: str | None = None,
                 running: list[pb.RunningActor] | None = None, connect: bool = True,
                 **custom: float) -> pb.RegisterNodeReply:
        session = session or self.sessions.get(node_id) or f"session-{node_id}"
        self.sessions[node_id] = session
        req = pb.RegisterNodeRequest(
            node_id=node_id, session_id=session, address="127.0.0.1",
            resources={"cpu": float(cpu), "gpu": float(gpu), **custom}, slots=int(cpu),
            running=running or [], hostname="test", pid=4242, version=__version__,
        )
        reply = self.c.register_node(req)
        self.epochs[node_id] = reply.node_epoch
        if connect:
            self.connect(node_id)
        return reply

    def connect(self, node_id: str) -> None:
        self.links.add(node_id)
        self.c.connect_node(node_id, self.epochs[node_id])

    def disconnect(self, node_id: str) -> None:
        self.links.discard(node_id)
        self.c.disconnect_node(node_id, self.epochs[node_id])

    def heartbeat(self, *node_ids: str) -> None:
        for node_id in node_ids:
            self.c.heartbeat(node_id, self.epochs[node_id])

    # ------------------------------------------------------------ actors

    def create(self, name: str, class_path: str = "tests.actors:Counter", max_restarts: int = -1,
               resources: dict[str, float] | None = None, kwargs=None, **fields):
        spec = pb.ActorSpec(name=name, class_path=class_path, max_restarts=max_restarts,
                            resources=resources or {},
                            kwargs=codec.encode(kwargs) if kwargs is not None else b"", **fields)
        return self.c.create_actor(spec)

    def starts(self, name: str | None = None, node_id: str | None = None) -> list[tuple[str, pb.StartActor]]:
        return [(n, m.start) for n, m in self.sent if m.HasField("start")
                and (name is None or m.start.spec.name == name) and (node_id is None or n == node_id)]

    def stops(self, name: str | None = None, node_id: str | None = None) -> list[tuple[str, pb.StopActor]]:
        return [(n, m.stop) for n, m in self.sent if m.HasField("stop")
                and (name is None or m.stop.name == name) and (node_id is None or n == node_id)]

    def last_start(self, name: str) -> tuple[str, pb.StartActor]:
        starts = self.starts(name)
        assert starts, f"no StartActor was sent for {name}"
        return starts[-1]

    def report(self, node_id: str, name: str, incarnation: int, kind: int, **fields) -> None:
        self.c.report(node_id, self.epochs[node_id],
                      pb.ActorReport(name=name, incarnation=incarnation, kind=kind, **fields))

    def started(self, name: str, pid: int = 1234) -> tuple[str, int]:
        """Answer the last StartActor for `name` with STARTED; returns (node, incarnation)."""
        node_id, start = self.last_start(name)
        self.report(node_id, name, start.incarnation, pb.REPORT_STARTED, pid=pid,
                    address=f"127.0.0.1:{10000 + start.incarnation % 50000}")
        return node_id, start.incarnation

    def running(self, name: str) -> pb.RunningActor:
        """What a worker would report for `name` as it is now."""
        rec = self.c.actors[name]
        return pb.RunningActor(spec=rec.spec, incarnation=rec.incarnation, pid=rec.pid,
                               address=rec.address, restarts=rec.restarts,
                               local_until=rec.local_until)

    def event_types(self, actor: str | None = None, node: str | None = None) -> list[str]:
        out = []
        for e in self.c.events.recent(100_000):
            if actor is not None and e.actor != actor:
                continue
            if node is not None and (e.actor or e.node_id != node):
                continue
            out.append(pb.EventType.Name(e.type).removeprefix("EVENT_"))
        return out
