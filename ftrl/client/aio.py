"""`ftrl.AsyncClient` and async actor handles.

`AsyncClient` puts together the client's parts, one module per job:

- `ftrl.client.connection`: channels, credentials, the coordinator call (`Connection`);
- `ftrl.client.handle`: actor handles and their calls (`AsyncActorHandle`);
- `ftrl.client.cluster_calls`: nodes, actors and learner meshes (`ClusterCalls`);
- `ftrl.client.job_calls`: jobs (`JobCalls`);
- `ftrl.client.events`: the event stream (`EventCalls`, `first_event`);
- `ftrl.client.logs`: actor logs read from the workers (`read_logs`).

Every name is still importable from here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from ftrl.client.cluster_calls import ClusterCalls
from ftrl.client.connection import CONTROL_TIMEOUT_S, DEFAULT_ADDRESS, default_address
from ftrl.client.events import EventCalls, first_event
from ftrl.client.handle import MAX_TRUST_S, REVALIDATE_TIMEOUT_S, AsyncActorHandle
from ftrl.client.job_calls import LONG_POLL_S, RESULTS_RETRY_S, SUBMIT_TIMEOUT_S, JobCalls
from ftrl.client.logs import read_logs
from ftrl.wire.errors import FtrlError


class AsyncClient(ClusterCalls, JobCalls, EventCalls):
    """Async client of an ftrl cluster. Create and use it inside one event loop.

    `AsyncClient(address="host:6380", token=None, *, security=None, caller="",
    timeout=10.0)`; see `Connection` for the arguments.
    """

    def logs(self, target: str, tail: int = 100, follow: bool = False) -> AsyncIterator[tuple[str, str]]:
        """(actor, line) from the log file of actor `target`, or of each actor of job
        `target`, read from the worker that holds it (also after the actor died): the
        last `tail` lines (-1: all), then with `follow` new lines until cancelled."""
        return read_logs(self, target, tail, follow)


__all__ = [
    "CONTROL_TIMEOUT_S",
    "DEFAULT_ADDRESS",
    "LONG_POLL_S",
    "MAX_TRUST_S",
    "RESULTS_RETRY_S",
    "REVALIDATE_TIMEOUT_S",
    "SUBMIT_TIMEOUT_S",
    "AsyncActorHandle",
    "AsyncClient",
    "FtrlError",
    "default_address",
    "first_event",
]
