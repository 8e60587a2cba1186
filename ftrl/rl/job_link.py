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
`on_reply`, on the link's thread. While the coordinator is unreachable the rows are
kept (the newest `max_rows`; older ones are dropped and counted: metrics.jsonl has
them all) and sent, in order, once it is back.

A coordinator that does not know the job (NotFoundError: the driver was started
outside the jobs API), or knows this driver as replaced (PermissionDeniedError, or a
reply naming a newer driver incarnation), or has no jobs API, ends the link quietly:
nothing more is sent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ftrl.client.jobs import FINAL_STAGES
from ftrl.util.backoff import Backoff
from ftrl.wire.errors import (
    FtrlError,
    InvalidArgumentError,
    MethodNotFoundError,
    NotFoundError,
    PermissionDeniedError,
)

log = logging.getLogger(__name__)


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
        max_backoff_s: float = 5.0,
    ):
        self.client = client
        self.job_id = job_id
        self.incarnation = int(incarnation)
        self.on_reply = on_reply
        self.batch_rows = max(1, int(batch_rows))
        self.call_timeout_s = call_timeout_s
        self.poll_interval_s = poll_interval_s
        self._backoff = Backoff(base=0.5, cap=max_backoff_s, jitter=0.0)  # between failed calls
        self._cond = threading.Condition()
        self._rows: deque[tuple[int, dict[str, Any]]] = deque(maxlen=max(1, int(max_rows)))  # (seq, row)
        self._row_seq = 0
        self._state: dict[str, Any] = {"stage": "STARTING", "iteration": 0, "env_steps_sampled": 0,
                                       "last_checkpoint": "", "reason": ""}
        self._version = 0  # bumped on every change of _state
        self._sent_version = -1
        self._next_call = 0.0  # monotonic time of the next call with nothing new to send
        self._last_ok = True
        self._closing = False
        # why the link ended early ("" while it works); a client without the jobs API
        # (the in-process LocalClient) never reports
        self.disabled = "" if hasattr(client, "report_job") else "the client has no report_job"
        self.final_delivered = False
        self.rows_dropped = 0  # rows the coordinator refused, or over max_rows
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

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closing and not self._due():
                    self._cond.wait(timeout=max(0.0, self._next_call - time.monotonic()))
                if self._closing or self.disabled:
                    return
                batch = [self._rows[i] for i in range(min(self.batch_rows, len(self._rows)))]
                complete = len(batch) == len(self._rows)
                state = dict(self._state)
                version = self._version
            rows = [row for _, row in batch]
            last_seq = batch[-1][0] if batch else 0
            if not complete and state["stage"] in FINAL_STAGES:
                state["stage"] = "RUNNING"  # rows first; the final stage goes with the last batch
            info = self._send(state, rows, last_seq)
            with self._cond:
                now = time.monotonic()
                self._last_ok = info is not None
                if info is None:
                    self._next_call = now + self._backoff.next_delay()
                else:
                    self._backoff.reset()
                    self._next_call = now + self.poll_interval_s
                    self._forget_rows(last_seq)
                    if complete or not rows:
                        self._sent_version = version
                        if state["stage"] in FINAL_STAGES:
                            self.final_delivered = True
                self._cond.notify_all()
            if info is not None and self.on_reply is not None and not self.final_delivered:
                try:
                    self.on_reply(info)
                except Exception:
                    log.exception("job %s: handling the coordinator's reply failed", self.job_id)

    def _forget_rows(self, last_seq: int) -> None:
        """Drop the queued rows up to `last_seq` (sent, or refused); under the lock."""
        while self._rows and self._rows[0][0] <= last_seq:
            self._rows.popleft()

    def _send(self, state: dict[str, Any], rows: list[dict[str, Any]], last_seq: int) -> dict[str, Any] | None:
        """One ReportJob call; the reply, or None after a failure (retried later)."""
        try:
            info = self.client.report_job(
                self.job_id, self.incarnation, state["stage"], int(state["iteration"]),
                int(state["env_steps_sampled"]), rows, last_checkpoint=state["last_checkpoint"] or "",
                reason=state["reason"] or "", timeout=self.call_timeout_s)
        except (NotFoundError, PermissionDeniedError, MethodNotFoundError) as e:
            self._disable(f"{type(e).__name__}: {e}")
            return None
        except InvalidArgumentError as e:
            # a report the coordinator will never take: drop these rows, go on with the rest
            log.error("job %s: the coordinator refused a report (%s); dropping %d rows", self.job_id, e, len(rows))
            with self._cond:
                self._forget_rows(last_seq)
                self.rows_dropped += len(rows)
            return None
        except Exception as e:  # unreachable, timed out, or a client shutting down
            if self._backoff.attempts == 0:
                level = logging.INFO if isinstance(e, FtrlError) else logging.WARNING
                log.log(level, "job %s: report to the coordinator failed (%s: %s); training goes on, "
                        "reports are kept", self.job_id, type(e).__name__, e)
            return None
        newer = int(info.get("driver_incarnation") or 0)
        if newer > self.incarnation:
            self._disable(f"the job's driver is incarnation {newer} now, this is {self.incarnation}")
            return None
        return info

    def _disable(self, why: str) -> None:
        log.info("job %s: not reporting to the coordinator (%s)", self.job_id, why)
        with self._cond:
            self.disabled = why
            self._rows.clear()
            self._cond.notify_all()
