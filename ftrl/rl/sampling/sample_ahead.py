"""Sampling ahead by RPC: the runners of clusters without a sample channel (TLS clusters,
whose channel would be plain TCP) sample their next fragment while the last one travels.

`EnvRunner.sample_ahead(**kwargs)` (asynchronous algorithms, by RPC) answers with the
fragment sampled ahead for the same arguments, or samples one now when there is none,
then starts the next one on a thread of its own (the actor's call thread returns the
answer meanwhile). One fragment ahead at most: with no call (the learner's queue full)
the runner waits. The fragment says which weights it acted with (first step and mean),
as on the sample channel (`ftrl.rl.sampling.sample_plane`); weights pushed meanwhile act
from its next vector step (`ftrl.rl.sampling.weights_inbox`). An error raised sampling
ahead is the next call's answer, and nothing is sampled ahead after it. Calls with other
arguments (a new fragment length) wait for the fragment ahead and drop it: it was
sampled for arguments nobody asks for any more.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Callable
from typing import Any


class AheadSampler:
    """At most one fragment sampled ahead of the next call, on one thread."""

    def __init__(self, sample: Callable[..., dict[str, Any]], name: str) -> None:
        self._sample = sample
        self._name = name
        self._lock = threading.Lock()
        self._pool: cf.ThreadPoolExecutor | None = None
        self._ahead: tuple[dict[str, Any], cf.Future] | None = None

    def next(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The fragment sampled ahead for `kwargs` (else one sampled now); then the next
        one starts."""
        with self._lock:
            ahead, self._ahead = self._ahead, None
            if ahead is not None and ahead[0] == kwargs:
                result = ahead[1].result()  # its error, if it failed, is this call's
            else:
                if ahead is not None:
                    cf.wait([ahead[1]])  # sampled for other arguments: dropped
                result = self._sample(**kwargs)
            if self._pool is None:
                self._pool = cf.ThreadPoolExecutor(1, thread_name_prefix=f"{self._name}-ahead")
            self._ahead = (dict(kwargs), self._pool.submit(self._sample, **kwargs))
            return result

    def close(self) -> None:
        """Stop sampling ahead (a fragment being sampled finishes; none is started)."""
        with self._lock:
            self._ahead = None
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
