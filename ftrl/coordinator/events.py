"""Actor and node events: a bounded log of recent events and live subscribers."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

from ftrl.wire import ftrl_pb2 as pb

RETAINED_EVENTS = 10_000
SUBSCRIBER_QUEUE = 10_000


@dataclass(eq=False)
class Subscription:
    """One watcher: events matching its filter are queued for it, bounded."""

    prefix: str
    nodes: bool
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(SUBSCRIBER_QUEUE))
    overflowed: bool = False

    def matches(self, event: pb.Event) -> bool:
        if event.actor:
            return event.actor.startswith(self.prefix)
        return self.nodes


class EventLog:
    """Numbers events, keeps the last RETAINED_EVENTS, and fans them out to subscribers.

    A subscriber that falls SUBSCRIBER_QUEUE events behind is marked overflowed
    and dropped, so a slow watcher can never make the coordinator's memory grow.
    """

    def __init__(self) -> None:
        self.seq = 0
        self._recent: deque[pb.Event] = deque(maxlen=RETAINED_EVENTS)
        self._subs: set[Subscription] = set()

    def emit(
        self,
        type_: int,
        actor: str = "",
        node_id: str = "",
        incarnation: int = 0,
        message: str = "",
    ) -> pb.Event:
        self.seq += 1
        event = pb.Event(
            seq=self.seq,
            type=type_,
            actor=actor,
            node_id=node_id,
            incarnation=incarnation,
            at=time.time(),
            message=message,
        )
        self._recent.append(event)
        for sub in list(self._subs):
            if not sub.matches(event):
                continue
            try:
                sub.queue.put_nowait(event)
            except asyncio.QueueFull:
                # Drop the laggard: empty its queue and leave one None as a marker.
                sub.overflowed = True
                self._subs.discard(sub)
                while not sub.queue.empty():
                    sub.queue.get_nowait()
                sub.queue.put_nowait(None)
        return event

    def subscribe(self, prefix: str = "", nodes: bool = False, after_seq: int = -1) -> Subscription:
        """A new subscription; retained events with seq > after_seq are queued first."""
        sub = Subscription(prefix, nodes)
        if after_seq >= 0:
            for event in self._recent:
                if event.seq > after_seq and sub.matches(event):
                    if sub.queue.full():
                        break
                    sub.queue.put_nowait(event)
        self._subs.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subs.discard(sub)

    def recent(self, limit: int = 100) -> list[pb.Event]:
        return list(self._recent)[-limit:]
