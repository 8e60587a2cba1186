"""`Outbox`: what this node has to tell the coordinator, kept across reconnects.

The actors' lifecycle (lifecycle.py) queues actor reports here and the drain (drain.py)
the node's drain; the coordinator link (link.py) writes them on its stream, a report
only leaving the queue once written (a broken stream keeps it for the next session).
The coordinator drops duplicates and news about replaced incarnations, so none made
between a registration and its stream is lost. Bounded: past `MAX_PENDING_REPORTS`
the oldest go.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

from ftrl.wire import ftrl_pb2 as pb

MAX_PENDING_REPORTS = 10_000


class Outbox:
    """Actor reports waiting for the coordinator, and the reason the node drains."""

    def __init__(self, max_reports: int = MAX_PENDING_REPORTS) -> None:
        self.reports: deque[pb.ActorReport] = deque(maxlen=max_reports)
        self.drain_reason = ""  # set once: the node drains (told on every new session)
        self.ready = asyncio.Event()  # set when there is something new to write

    def report(self, **fields: Any) -> None:
        """Queue an ActorReport with `fields` (stamped now)."""
        self.reports.append(pb.ActorReport(at=time.time(), **fields))
        self.ready.set()

    def announce_drain(self, reason: str) -> None:
        """Tell the coordinator this node drains (now, and on every new session)."""
        self.drain_reason = reason
        self.ready.set()
