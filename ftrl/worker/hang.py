"""Hang detection: every alive actor is pinged on its own event loop; one that does not
answer for the hang timeout (SIGSTOP, a wedged loop) is handed to the agent, which
kills it and reports it (its death then goes the usual way: a restart in place or not).

Silence is counted on the worker's awake clock, so a pause of the worker itself
(SIGSTOP, a paused VM) never makes its actors look hung."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence

import grpc

from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.grpcopts import channel_options
from ftrl.wire.security import Security, secure_channel
from ftrl.worker.local_actor import LocalActor

log = logging.getLogger("ftrl.worker.agent")


class HangWatch:
    """Pings the alive actors of `actors` each round (at `address`:their port); calls
    `on_hung(actor, silent_s)` for one silent longer than `timeout_s` on `awake`."""

    def __init__(self, actors: Mapping[str, LocalActor], address: str, security: Security,
                 metadata: Sequence[tuple[str, str]], awake: Callable[[], float], timeout_s: float,
                 on_hung: Callable[[LocalActor, float], None]) -> None:
        self.actors = actors
        self.address = address
        self.security = security
        self.metadata = metadata
        self.awake = awake
        self.timeout_s = timeout_s
        self.on_hung = on_hung
        self._channels: dict[str, tuple[grpc.aio.Channel, pb_grpc.ActorStub]] = {}

    def _stub(self, target: str) -> pb_grpc.ActorStub:
        entry = self._channels.get(target)
        if entry is None:
            channel = secure_channel(target, self.security, channel_options(1 << 20))
            entry = (channel, pb_grpc.ActorStub(channel))
            self._channels[target] = entry
        return entry[1]

    async def _ping_one(self, la: LocalActor, target: str, timeout: float) -> None:
        try:
            reply = await self._stub(target).Ping(
                pb.PingRequest(incarnation=la.incarnation), timeout=timeout, metadata=self.metadata)
            if reply.incarnation == la.incarnation:
                la.last_pong = self.awake()
        except grpc.RpcError:
            pass
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the loop itself is being stopped
        silent_s = self.awake() - la.last_pong  # the worker's own pauses left out
        if la.state == "alive" and silent_s > self.timeout_s:
            self.on_hung(la, silent_s)

    async def run(self) -> None:
        """Ping every alive actor each round. The channels belong to this loop alone
        (one per actor address); channels of actors gone are closed between rounds."""
        interval = max(0.05, min(1.0, self.timeout_s / 4))
        while True:
            await asyncio.sleep(interval)
            try:
                alive = {f"{self.address}:{la.port}": la for la in self.actors.values()
                         if la.state == "alive" and not la.hung}
                if alive:
                    await asyncio.gather(*(self._ping_one(la, target, interval)
                                           for target, la in alive.items()))
                for target in [t for t in self._channels if t not in alive]:
                    channel, _ = self._channels.pop(target)
                    await channel.close()
            except asyncio.CancelledError:
                raise
            except Exception:  # never let hang detection stop for good
                log.exception("ping round failed")

    async def close(self) -> None:
        """Close the ping channels (once `run` has ended)."""
        for channel, _ in self._channels.values():
            await channel.close()
        self._channels.clear()
