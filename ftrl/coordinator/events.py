"""Actor and node events: a bounded log of recent events and live subscribers."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field

from ftrl.util.logfmt import actor_fields, kv
from ftrl.wire import ftrl_pb2 as pb

#: One line per event, key=value (`grep event=ACTOR_RESTARTED`, or a log shipper's parser).
event_log = logging.getLogger("ftrl.events")

_NODE_OR_JOB = (pb.EVENT_JOB, pb.EVENT_NODE_LOST, pb.EVENT_NODE_JOINED, pb.EVENT_NODE_EXCLUDED,
                pb.EVENT_NODE_DRAINING, pb.EVENT_NODE_READMITTED)


def event_kind(type_: int) -> str:
    """The event's name in log lines: ACTOR_RESTARTED, NODE_LOST, JOB..."""
    name = pb.EventType.Name(type_).removeprefix("EVENT_")
    return name if type_ in _NODE_OR_JOB else f"ACTOR_{name}"


def event_line(event: pb.Event) -> str:
    """The event as one key=value line: event, node, actor, incarnation, job (the actor
    name's prefix before its first `/`, or the job id of a job event), stage (job events),
    reason (the message's first line, quoted)."""
    reason = event.message.split("\n", 1)[0]
    if event.type == pb.EVENT_JOB:
        stage, sep, rest = reason.partition(": ")
        if not sep and reason.isupper():
            stage, rest = reason, ""
        elif not (sep and stage.isupper()):
            stage, rest = "", reason
        return kv(event="JOB", job=event.actor, stage=stage, reason=rest)
    return kv(event=event_kind(event.type), **actor_fields(event.node_id, event.actor, event.incarnation),
              reason=reason)


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
        self.counts: dict[int, int] = {}  # events emitted by type since start (/metrics counters)

    def emit(
        self,
        type_: int,
        actor: str = "",
        node_id: str = "",
        incarnation: int = 0,
        message: str = "",
    ) -> pb.Event:
        self.seq += 1
        self.counts[type_] = self.counts.get(type_, 0) + 1
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
        if event_log.isEnabledFor(logging.INFO):
            event_log.info("%s", event_line(event))
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
