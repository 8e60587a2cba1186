"""The coordinator's Prometheus metrics (served at `/metrics` by ftrl.coordinator.http).

Everything but the heartbeat histogram is read from the controller at scrape time by
one Collector, so nothing is kept twice and nothing costs anything between scrapes.
The heartbeat histogram is observed on every heartbeat (5,000 a second at 5,000 nodes),
so it is a plain one of the event-loop thread (0.4 us an observation, no lock), not
prometheus_client's Histogram (2.5 us).
Series are per cluster, per state or per job, never per node or per actor: a scrape
of 5,000 nodes and 10,000 actors is a few counting passes over the records.
The registry is this object's own (not prometheus_client's global one), so several
coordinators in one process (tests) never clash.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder

from ftrl._version import __version__
from ftrl.coordinator.records import ActorState, NodeState
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb

if TYPE_CHECKING:
    from ftrl.coordinator.controller import Controller

__all__ = ["CoordinatorMetrics"]

#: Heartbeat handling takes microseconds; the upper buckets catch a stalled loop.
HEARTBEAT_BUCKETS = (25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
                     50e-3, 100e-3, 250e-3, 1.0)
LOOP_LAG_BUCKETS = (1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0, 2.5, 5.0)
#: Users see STARTING as PENDING (as in `ftrl status`).
ACTOR_STATES = {ActorState.PENDING: "PENDING", ActorState.STARTING: "PENDING",
                ActorState.ALIVE: "ALIVE", ActorState.RESTARTING: "RESTARTING",
                ActorState.DEAD: "DEAD"}
E = pb.EventType


def _number(value: Any) -> float | None:
    """A finite float from a metrics row value, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


class LoopHistogram:
    """A histogram observed from the event-loop thread only (so no lock)."""

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = [*sorted(buckets), math.inf]
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def collect(self) -> Iterator[Metric]:
        cumulative, buckets = 0, []
        for bound, n in zip(self.bounds, self.counts, strict=True):
            cumulative += n
            buckets.append(("+Inf" if bound == math.inf else repr(bound), cumulative))
        yield HistogramMetricFamily(self.name, self.documentation, buckets=buckets, sum_value=self.sum)


class ControllerCollector:
    """Reads the controller's records at scrape time (a prometheus_client Collector)."""

    def __init__(self, controller: Controller, http_requests: dict[tuple[str, str], int]) -> None:
        self.c = controller
        self.started_unix = time.time()
        self.http_requests = http_requests
        self._rows: dict[str, tuple[int, dict[str, Any]]] = {}  # job id -> (seq, decoded row)

    def _metrics_row(self, job_id: str, seq: int, row: bytes) -> dict[str, Any]:
        """A job's newest metrics row, decoded once per change of the job."""
        cached = self._rows.get(job_id)
        if cached is not None and cached[0] == seq:
            return cached[1]
        try:
            value = codec.decode(row, codec.SMALL_LIMITS) if row else {}
        except Exception:
            value = {}
        value = value if isinstance(value, dict) else {}
        self._rows[job_id] = (seq, value)
        return value

    def collect(self) -> Iterator[Metric]:
        c = self.c
        yield from self._cluster(c)
        yield from self._jobs(c)
        requests = CounterMetricFamily("ftrl_http_requests", "HTTP requests answered, by route and "
                                       "status code", labels=["route", "code"])
        for (route, code), n in sorted(self.http_requests.items()):
            requests.add_metric([route, code], n)
        yield requests

    def _cluster(self, c: Controller) -> Iterator[Metric]:
        info = InfoMetricFamily("ftrl_build", "ftrl version of this coordinator")
        info.add_metric([], {"version": __version__, "coordinator_id": c.coordinator_id})
        yield info
        yield GaugeMetricFamily("ftrl_coordinator_uptime_seconds", "Seconds since this coordinator "
                                "started", value=max(0.0, c.clock() - c.started))
        yield GaugeMetricFamily("ftrl_coordinator_start_time_seconds", "Unix time this coordinator "
                                "started", value=self.started_unix)
        node_counts = dict.fromkeys(NodeState, 0)
        connected = 0
        for node in c.nodes.values():
            node_counts[node.state] += 1
            connected += node.connected
        nodes = GaugeMetricFamily("ftrl_nodes", "Nodes by state", labels=["state"])
        for state, n in node_counts.items():
            nodes.add_metric([state.value], n)
        yield nodes
        yield GaugeMetricFamily("ftrl_nodes_connected", "Nodes with an open worker stream",
                                value=connected)
        actor_counts = dict.fromkeys(sorted(set(ACTOR_STATES.values())), 0)
        for rec in c.actors.values():
            actor_counts[ACTOR_STATES[rec.state]] += 1
        actors = GaugeMetricFamily("ftrl_actors", "Actors by state", labels=["state"])
        for state, n in actor_counts.items():
            actors.add_metric([state], n)
        yield actors
        counts = c.events.counts
        yield CounterMetricFamily("ftrl_actor_restarts", "Actor restarts that came back ALIVE "
                                  "since the coordinator started", value=counts.get(E.EVENT_RESTARTED, 0))
        yield CounterMetricFamily("ftrl_actor_failures", "Actor deaths (exits, hangs, lost nodes) "
                                  "since the coordinator started", value=counts.get(E.EVENT_DIED, 0))
        failures = CounterMetricFamily("ftrl_node_failures", "Nodes declared LOST (no heartbeat) or "
                                       "EXCLUDED (too many actor failures) since the coordinator "
                                       "started", labels=["reason"])
        failures.add_metric(["lost"], counts.get(E.EVENT_NODE_LOST, 0))
        failures.add_metric(["excluded"], counts.get(E.EVENT_NODE_EXCLUDED, 0))
        yield failures
        events = CounterMetricFamily("ftrl_events", "Cluster events emitted, by type", labels=["type"])
        for type_, n in sorted(counts.items()):
            events.add_metric([pb.EventType.Name(type_).removeprefix("EVENT_")], n)
        yield events

    def _jobs(self, c: Controller) -> Iterator[Metric]:
        labels = ["job"]
        stage = GaugeMetricFamily("ftrl_job_stage", "1 for the job's current stage", labels=["job", "stage"])
        iteration = GaugeMetricFamily("ftrl_job_iteration", "Training iterations done", labels=labels)
        steps = CounterMetricFamily("ftrl_job_env_steps_sampled", "Env steps sampled", labels=labels)
        ret = GaugeMetricFamily("ftrl_job_episode_return_mean", "Mean return of the last 100 "
                                "episodes", labels=labels)
        healthy = GaugeMetricFamily("ftrl_job_healthy_env_runners", "Env runners healthy in the "
                                    "last iteration", labels=labels)
        wanted = GaugeMetricFamily("ftrl_job_env_runners_wanted", "Env runners the job is scaled to",
                                   labels=labels)
        learners = GaugeMetricFamily("ftrl_job_learners_wanted", "Learners the job is scaled to",
                                     labels=labels)
        epoch = GaugeMetricFamily("ftrl_job_learner_mesh_epoch", "Epoch of the job's learner mesh "
                                  "(jobs with learners)", labels=labels)
        seen = set()
        for job in c.jobs.jobs.values():
            seen.add(job.job_id)
            key = [job.job_id]
            stage.add_metric([job.job_id, job.stage.value], 1)
            iteration.add_metric(key, job.iteration)
            steps.add_metric(key, job.env_steps_sampled)
            wanted.add_metric(key, job.num_env_runners)
            learners.add_metric(key, job.num_learners)
            row = self._metrics_row(job.job_id, job.seq, job.metrics)
            value = _number(row.get("episode_return_mean"))
            if value is not None:
                ret.add_metric(key, value)
            value = _number(row.get("num_healthy_env_runners"))
            if value is not None:
                healthy.add_metric(key, value)
            if job.num_learners > 0:
                mesh = c.meshes.meshes.get(f"{job.job_id}/learner")
                value = float(mesh.epoch) if mesh is not None else _number(row.get("mesh_epoch"))
                if value is not None:
                    epoch.add_metric(key, value)
        for job_id in [j for j in self._rows if j not in seen]:
            del self._rows[job_id]
        yield from (stage, iteration, steps, ret, healthy, wanted, learners, epoch)


class CoordinatorMetrics:
    """The coordinator's registry: the controller collector plus the heartbeat histogram
    (observed by the servicer) and the HTTP request counts (kept by the HTTP server)."""

    def __init__(self, controller: Controller) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.http_requests: dict[tuple[str, str], int] = {}
        self.collector = ControllerCollector(controller, self.http_requests)
        self.registry.register(self.collector)  # type: ignore[arg-type]
        self.heartbeat_seconds = LoopHistogram(
            "ftrl_heartbeat_handling_seconds", "Time the coordinator spends handling one worker "
            "heartbeat (lease renewal and ack)", HEARTBEAT_BUCKETS)
        self.registry.register(self.heartbeat_seconds)  # type: ignore[arg-type]
        self.loop_lag_seconds = LoopHistogram(
            "ftrl_coordinator_loop_lag_seconds", "How late the coordinator's event loop runs a "
            "timer (sampled 20 times a second): its backlog of work", LOOP_LAG_BUCKETS)
        self.registry.register(self.loop_lag_seconds)  # type: ignore[arg-type]

    def count_request(self, route: str, code: int) -> None:
        key = (route, str(code))
        self.http_requests[key] = self.http_requests.get(key, 0) + 1
        if len(self.http_requests) > 1000:  # routes and codes are a fixed set; stay bounded anyway
            self.http_requests.clear()

    def render(self, accept: str = "") -> tuple[bytes, str]:
        """Everything above in the format the scraper's Accept header asks for (Prometheus
        text 0.0.4 by default, OpenMetrics on request): (body, content type)."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type
