"""JobLink: a driver's reports to its job record on the coordinator (ReportJob).

    link = JobLink(client, "job", incarnation, on_reply=driver_sees).start()
    link.report("RUNNING", iteration=3, env_steps_sampled=96, row=metrics_row,
                last_checkpoint="/runs/job/checkpoints/checkpoint_00000002.ftrl")
    link.finish("FINISHED", "stop_iters")     # delivered (bounded), then the thread ends

Training never waits for the coordinator: `report` only queues. The link's thread
sends what is queued (rows in order, in batches, stage and counters merged to the
newest), each call bounded by `call_timeout_s`; when nothing is queued it polls (a
report with no rows) every `poll_interval_s`, so the driver learns of stop and scale
requests within about a second. Every reply (the job record as a dict) goes to
`on_reply`, on the link's thread.

While the coordinator is unreachable the rows are kept (the newest `max_rows`; older
ones are dropped and counted: metrics.jsonl has them all) and the link tries again every
`retry_interval_s` (a call fails at once while gRPC's channel is down; the channel
reconnects on its own, see ftrl.wire.grpcopts), logging one line per outage. The call
after a failed one (and the link's very first call) carries the driver's current state
with only the newest queued row, so `ftrl status` is fresh as soon as the coordinator
answers; the older rows follow, in order, in batches (the coordinator keeps the newest
row shown: see ftrl.coordinator.jobs). Each row is sent once; a final stage goes with
the last of them.
Other failures (the coordinator refusing or failing the call) are retried after a
capped backoff up to `max_backoff_s`.

A coordinator that does not know the job (NotFoundError: the driver was started
outside the jobs API), or knows this driver as replaced (PermissionDeniedError, or a
reply naming a newer driver incarnation), or has no jobs API, ends the link quietly:
nothing more is sent.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ftrl.client.jobs import FINAL_STAGES
from ftrl.util.backoff import Backoff
from ftrl.wire.errors import (
    ActorUnavailableError,
    FtrlError,
    FtrlTimeoutError,
    InvalidArgumentError,
    MethodNotFoundError,
    NotFoundError,
    PermissionDeniedError,
)

log = logging.getLogger(__name__)

#: What a call raises while the coordinator is down or restarting: retried at once
#: (every `retry_interval_s`), without backing off.
UNREACHABLE = (ActorUnavailableError, FtrlTimeoutError)


class JobLink:
    """Sends a driver's progress to the coordinator on a thread of its own (owned by the
    driver: `finish` or `close` ends it). See the module docstring."""

    def __init__(
        self,
        client: Any,
        job_id: str,
        incarnation: int,
        on_reply: Callable[[dict[str, Any]], Any] | None = None,
        *,
        max_rows: int = 10_000,
        batch_rows: int = 100,
        call_timeout_s: float = 5.0,
        poll_interval_s: float = 1.0,
        retry_interval_s: float = 0.1,
        max_backoff_s: float = 5.0,
    ):
        self.client = client
        self.job_id = job_id
        self.incarnation = int(incarnation)
        self.on_reply = on_reply
        self.batch_rows = max(1, int(batch_rows))
        self.call_timeout_s = call_timeout_s
        self.poll_interval_s = poll_interval_s
        self.retry_interval_s = retry_interval_s  # after a call that found the coordinator unreachable
        self._backoff = Backoff(base=0.5, cap=max_backoff_s, jitter=0.0)  # after a call it failed
        self._cond = threading.Condition()
        self._rows: deque[tuple[int, dict[str, Any]]] = deque(maxlen=max(1, int(max_rows)))  # (seq, row)
        self._row_seq = 0
        self._delivered_seq = 0  # the newest row the coordinator has taken
        self._newest_first = True  # the next call: the current state and the newest row only
        self._state: dict[str, Any] = {"stage": "STARTING", "iteration": 0, "env_steps_sampled": 0,
                                       "last_checkpoint": "", "reason": ""}
        self._version = 0  # bumped on every change of _state
        self._sent_version = -1
        self._next_call = 0.0  # monotonic time of the next call with nothing new to send
        self._last_ok = True
        self._outage_since: float | None = None  # monotonic time of the first failed call in a row
        self._closing = False
        # why the link ended early ("" while it works); a client without the jobs API
        # (the in-process LocalClient) never reports
        self.disabled = "" if hasattr(client, "report_job") else "the client has no report_job"
        self.final_delivered = False
        self.rows_dropped = 0  # rows the coordinator refused, or over max_rows
        self.failed_calls = 0  # calls that failed, all outages together
        self._thread = threading.Thread(target=self._run, name="ftrl-job-link", daemon=True)

    # ------------------------------------------------------------------ the driver's side

    def start(self) -> JobLink:
        self._thread.start()
        return self

    def report(
        self,
        stage: str | None = None,
        *,
        iteration: int | None = None,
        env_steps_sampled: int | None = None,
        row: dict[str, Any] | None = None,
        last_checkpoint: str | None = None,
        reason: str | None = None,
    ) -> None:
        """Queue a report (never blocks on the network). Given fields replace the
        pending ones; `row` (one metrics.jsonl row) is appended to the rows to send."""
        with self._cond:
            if self.disabled or self._closing:
                return
            if row is not None:
                if len(self._rows) == self._rows.maxlen:
                    self.rows_dropped += 1
                    if self.rows_dropped == 1:
                        log.warning("job %s: coordinator unreachable for long; dropping its oldest "
                                    "unsent metrics rows (metrics.jsonl keeps them)", self.job_id)
                self._row_seq += 1
                self._rows.append((self._row_seq, row))
            for key, value in (("stage", stage), ("iteration", iteration), ("env_steps_sampled", env_steps_sampled),
                               ("last_checkpoint", last_checkpoint), ("reason", reason)):
                if value is not None and self._state[key] != value:
                    self._state[key] = value
                    self._version += 1
            self._cond.notify_all()

    def finish(self, stage: str, reason: str = "", *, timeout_s: float = 60.0, **fields: Any) -> bool:
        """Queue the final `stage` (with `reason` and any `report` fields), wait up to
        `timeout_s` until it was delivered, then end the thread. Returns whether the
        coordinator got it (also True when the link had ended: nothing to deliver to)."""
        if stage not in FINAL_STAGES:
            raise ValueError(f"not a final stage: {stage!r}")
        self.report(stage, reason=reason, **fields)
        with self._cond:
            if self._thread.is_alive():
                self._cond.wait_for(lambda: self.final_delivered or bool(self.disabled), timeout=timeout_s)
            ok = self.final_delivered or bool(self.disabled)
        if not ok:
            log.error("job %s: the coordinator did not take the final report (%s) within %gs",
                      self.job_id, stage, timeout_s)
        self.close()
        return ok

    def close(self, flush_s: float = 0.0) -> bool:
        """End the thread without a final stage, after up to `flush_s` for what is
        queued to be delivered. Returns whether nothing was left unsent."""
        with self._cond:
            if flush_s > 0 and self._thread.is_alive():
                self._cond.wait_for(lambda: not self._news() or bool(self.disabled), timeout=flush_s)
            flushed = not self._news() or bool(self.disabled)
            self._closing = True
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.call_timeout_s + 1.0)
        return flushed

    @property
    def pending_rows(self) -> int:
        with self._cond:
            return len(self._rows)

    # ------------------------------------------------------------------ the link's thread

    def _news(self) -> bool:
        return bool(self._rows) or self._version != self._sent_version

    def _due(self) -> bool:
        return (self._news() and self._last_ok) or time.monotonic() >= self._next_call

    def _next_rows(self) -> tuple[list[tuple[int, dict[str, Any]]], bool]:
        """The queued rows the next call carries, and whether they are all of them (under
        the lock). After a failed call (and on the first) only the newest row, if it is
        newer than any delivered: the coordinator shows the driver's current state at
        once, the older rows follow. Otherwise the oldest `batch_rows`, in order."""
        if self._newest_first and self._rows and self._rows[-1][0] > self._delivered_seq:
            batch = [self._rows[-1]]
        else:
            batch = list(itertools.islice(self._rows, self.batch_rows))
        return batch, len(batch) == len(self._rows)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closing and not self._due():
                    self._cond.wait(timeout=max(0.0, self._next_call - time.monotonic()))
                if self._closing or self.disabled:
                    return
                batch, complete = self._next_rows()
                state = dict(self._state)
                version = self._version
            seqs = [seq for seq, _ in batch]
            if not complete and state["stage"] in FINAL_STAGES:
                state["stage"] = "RUNNING"  # rows first; the final stage goes with the last batch
            info, retry_s = self._send(state, [row for _, row in batch], seqs)
            with self._cond:
                if info is None:
                    self._failed(retry_s)
                else:
                    self._delivered(seqs, complete, version, state["stage"])
                self._cond.notify_all()
            if info is not None and self.on_reply is not None and not self.final_delivered:
                try:
                    self.on_reply(info)
                except Exception:
                    log.exception("job %s: handling the coordinator's reply failed", self.job_id)

    def _failed(self, retry_s: float) -> None:
        """After a failed call (under the lock): the next one in `retry_s`, newest first."""
        self._last_ok = False
        self._newest_first = True
        self._next_call = time.monotonic() + retry_s

    def _delivered(self, seqs: list[int], complete: bool, version: int, stage: str) -> None:
        """After a call the coordinator took (under the lock)."""
        now = time.monotonic()
        if self._outage_since is not None:
            log.debug("job %s: reports delivered again after %.1fs (%d failed calls)", self.job_id,
                      now - self._outage_since, self.failed_calls)
            self._outage_since = None
        self._last_ok = True
        self._newest_first = False
        self._backoff.reset()
        self._next_call = now + self.poll_interval_s
        self._delivered_seq = max([self._delivered_seq, *seqs])
        self._forget_rows(seqs)
        if complete or not seqs:
            self._sent_version = version
            if stage in FINAL_STAGES:
                self.final_delivered = True

    def _forget_rows(self, seqs: list[int]) -> None:
        """Drop the queued rows `seqs` (sent, or refused; under the lock)."""
        gone = set(seqs)
        if gone:
            kept = [item for item in self._rows if item[0] not in gone]
            self._rows.clear()
            self._rows.extend(kept)

    def _send(self, state: dict[str, Any], rows: list[dict[str, Any]],
              seqs: list[int]) -> tuple[dict[str, Any] | None, float]:
        """One ReportJob call: (the reply, 0), or after a failure (None, seconds until the
        next try)."""
        try:
            info = self.client.report_job(
                self.job_id, self.incarnation, state["stage"], int(state["iteration"]),
                int(state["env_steps_sampled"]), rows, last_checkpoint=state["last_checkpoint"] or "",
                reason=state["reason"] or "", timeout=self.call_timeout_s)
        except (NotFoundError, PermissionDeniedError, MethodNotFoundError) as e:
            self._disable(f"{type(e).__name__}: {e}")
            return None, 0.0
        except InvalidArgumentError as e:
            # a report the coordinator will never take: drop these rows, go on with the rest
            log.error("job %s: the coordinator refused a report (%s); dropping %d rows", self.job_id, e, len(rows))
            with self._cond:
                self._forget_rows(seqs)
                self.rows_dropped += len(rows)
            return None, self._backoff.next_delay()
        except Exception as e:  # unreachable, timed out, failed, or a client shutting down
            return None, self._call_failed(e)
        newer = int(info.get("driver_incarnation") or 0)
        if newer > self.incarnation:
            self._disable(f"the job's driver is incarnation {newer} now, this is {self.incarnation}")
            return None, 0.0
        return info, 0.0

    def _call_failed(self, e: Exception) -> float:
        """Log the first failed call of an outage (one line); the delay until the next
        try: short and fixed while the coordinator is unreachable, else backing off."""
        self.failed_calls += 1
        if self._outage_since is None:
            self._outage_since = time.monotonic()
            level = logging.INFO if isinstance(e, FtrlError) else logging.WARNING
            log.log(level, "job %s: report to the coordinator failed (%s: %s); training goes on, "
                    "reports are kept and sent once it answers", self.job_id, type(e).__name__, e)
        if isinstance(e, UNREACHABLE):
            return self.retry_interval_s
        return self._backoff.next_delay()

    def _disable(self, why: str) -> None:
        log.info("job %s: not reporting to the coordinator (%s)", self.job_id, why)
        with self._cond:
            self.disabled = why
            self._rows.clear()
            self._cond.notify_all()
