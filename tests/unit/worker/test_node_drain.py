"""The node's drain (`NodeDrain`) on small fakes of the actors and the link: who moves
the actors (the coordinator, or the worker itself when the coordinator is away), that
the coordinator is told once, and that the agent is stopped at the end."""

from __future__ import annotations

import asyncio

from ftrl.worker.drain import NodeDrain
from ftrl.worker.outbox import Outbox


class Actors:
    """The node's actors as the drain sees them: names that go away when stopped."""

    def __init__(self, names: list[str]) -> None:
        self.left = sorted(names)
        self.drain: tuple[str, float] | None = None
        self.drained_by_us = 0

    def names(self) -> list[str]:
        return list(self.left)

    def begin_drain(self, reason: str, deadline: float) -> None:
        self.drain = (reason, deadline)

    def drain_remaining(self) -> None:
        self.drained_by_us += 1
        self.left = []


class Link:
    """The coordinator link as the drain sees it."""

    def __init__(self, connected: bool) -> None:
        self.connected = asyncio.Event()
        if connected:
            self.connected.set()
        self.flushed = 0

    async def flush(self, timeout: float) -> str:
        self.flushed += 1
        return ""


def test_without_the_coordinator_the_worker_drains_its_actors_itself_then_stops():
    async def scenario() -> None:
        actors, link, outbox, stopped = Actors(["a/1", "a/2"]), Link(connected=False), Outbox(), asyncio.Event()
        drain = NodeDrain(20.0, actors, link, outbox, stop=stopped.set)
        run = asyncio.create_task(drain.run())
        assert drain.drain("spot reclaim")
        assert not drain.drain("again"), "a second drain() must say it drains already"
        await asyncio.wait_for(run, 10.0)
        assert stopped.is_set()
        assert actors.drain is not None and actors.drain[0] == "spot reclaim"
        assert actors.drained_by_us == 1 and link.flushed == 1
        assert outbox.drain_reason == "spot reclaim" and outbox.ready.is_set()

    asyncio.run(scenario())


def test_with_the_coordinator_it_waits_for_the_coordinator_to_move_the_actors():
    async def scenario() -> None:
        actors, link, stopped = Actors(["a/1"]), Link(connected=True), asyncio.Event()
        drain = NodeDrain(20.0, actors, link, Outbox(), stop=stopped.set)
        run = asyncio.create_task(drain.run())
        drain.drain("")
        await asyncio.sleep(0.3)
        assert not run.done() and not stopped.is_set()
        actors.left = []  # the coordinator stopped it (StopActor drain=True)
        await asyncio.wait_for(run, 10.0)
        assert stopped.is_set() and actors.drained_by_us == 0
        assert actors.drain is not None and actors.drain[0] == "drain requested"

    asyncio.run(scenario())


def test_the_drain_timeout_stops_the_agent_with_actors_left():
    async def scenario() -> None:
        actors, stopped = Actors(["a/stuck"]), asyncio.Event()
        actors.drain_remaining = lambda: None  # an actor that never ends
        drain = NodeDrain(0.5, actors, Link(connected=False), Outbox(), stop=stopped.set)
        run = asyncio.create_task(drain.run())
        drain.drain("test")
        await asyncio.wait_for(run, 10.0)
        assert stopped.is_set() and actors.left == ["a/stuck"]

    asyncio.run(scenario())
