"""Synchronous sampling: fragments from every runner that samples, until a train batch
arrived, each sample recorded into the run state (`Algorithm.synchronous_parallel_sample`).

    fragments = sample_synchronously(runners, run, target_env_steps=4000, timeout_s=60,
                                     current_version=7, sync_weights=algo.sync_weights)

The local runner (`num_env_runners=0`) samples until the target. A runner group samples
in rounds (`EnvRunnerGroup.sample`) until the target or the timeout: a round after a
short one (a runner died, a fragment was late) asks just for the missing steps, a
fragment of weights too old is dropped by the group (counted there), a malformed one
here (logged). The runners never sample with other weights than the learner's: they
are synced first when they are behind.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ftrl.rl.driver.run_state import RunState
from ftrl.rl.driver.runners import DriverRunners
from ftrl.rl.sample_batch import check_fragment

log = logging.getLogger(__name__)


def sample_synchronously(runners: DriverRunners, run: RunState, *, target_env_steps: int, timeout_s: float,
                         current_version: int, sync_weights: Callable[[], None]) -> list[dict[str, np.ndarray]]:
    """Fragments of at least `target_env_steps` usable env steps (or what `timeout_s`
    allowed a runner group); every sample result is recorded into `run`."""
    fragments: list[dict[str, np.ndarray]] = []
    got = 0
    if runners.local is not None:
        while got < target_env_steps:
            result = runners.local.sample()
            run.record_sample(result)
            fragments.append(result["batch"])
            got += result["env_steps"]
        return fragments
    group = runners.group
    assert group is not None
    deadline = time.monotonic() + timeout_s
    if group.latest_version != current_version:  # never sample with other weights
        sync_weights()
    rounds = 0
    while got < target_env_steps and time.monotonic() < deadline:
        group.wait_for_healthy()
        # a round after a short one (a runner died, a late fragment): just the missing steps
        round_ = group.sample(target_env_steps - got, current_version=current_version, top_up=rounds > 0)
        rounds += 1
        for result in round_.results:
            run.record_sample(result)
            fragment = _usable(result)
            if fragment is not None:
                fragments.append(fragment)
        got += round_.env_steps
        if not round_.results and not group.in_flight():  # nothing could be asked: no hot loop
            time.sleep(0.01)
    return fragments


def _usable(result: dict[str, Any]) -> dict[str, np.ndarray] | None:
    """The fragment of a sample result, unless it was dropped or is malformed (logged)."""
    if result.get("dropped", False):
        return None
    try:
        check_fragment(result["batch"])
    except ValueError as e:
        log.warning("dropping a malformed fragment from runner %s: %s", result.get("worker_index"), e)
        return None
    return result["batch"]
