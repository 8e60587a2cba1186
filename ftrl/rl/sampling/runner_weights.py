"""Weight sync for the runner group: the latest weights, and who still needs them.

`RunnerWeights` keeps the latest (version, weights, observation filter state) the driver
pushed (a recovering or joining runner gets them before it is healthy) and sends them to
every healthy runner with no request out that does not have them yet. A runner busy
with a sample gets them before its next one (`catch_up`, called by the sampling rounds).
The sending itself (broadcast tree, weights plane, direct calls) is
`ftrl.rl.weights.sync.WeightSync`'s; a failed send goes through the runner set's policy.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ftrl.rl.sampling.runner_slot import RunnerSlot
from ftrl.rl.weights.sync import CallAll, OnFailure, WeightSync


class SyncedRunners(Protocol):
    """What the weight sync needs of the runner set (`RunnerSet`)."""

    def idle_healthy(self) -> list[RunnerSlot]: ...

    def call_all(self, handles: dict[str, Any], method: str, *args: Any, timeout: float | None = None,
                 **kwargs: Any) -> tuple[dict[str, Any], dict[str, BaseException]]: ...

    def on_failure(self, slot: RunnerSlot, error: BaseException, what: str) -> None: ...


class RunnerWeights:
    """The latest weights, pushed to the runners that need them.

    Args:
        client: the cluster client (decides whether a weights plane node is started).
        runners: the runner set sent to.
        kind: what the runners are, for logs.
        fanout: children per node of the broadcast tree.
        hop_timeout_s: the bound of one call, and of each level of the tree.
        sync: the sender (default: a `WeightSync` over `runners`); tests give a fake.
    """

    def __init__(self, client: Any, runners: SyncedRunners, *, kind: str, fanout: int, hop_timeout_s: float,
                 sync: WeightSync | None = None):
        self._runners = runners
        call_all: CallAll = runners.call_all
        on_failure: OnFailure = runners.on_failure
        self.sync = sync if sync is not None else WeightSync(
            client, kind=kind, fanout=fanout, hop_timeout_s=hop_timeout_s, call_all=call_all, on_failure=on_failure)
        self._latest: tuple[int, np.ndarray | None, dict | None] = (-1, None, None)

    @property
    def latest(self) -> tuple[int, np.ndarray | None, dict | None]:
        """(version, weights, filter state) pushed last ((-1, None, None) before the first)."""
        return self._latest

    @property
    def latest_version(self) -> int:
        return self._latest[0]

    def push(self, version: int, weights: np.ndarray, filter_state: dict | None = None) -> None:
        """Make `version` the latest and push it (and the filter state) to every healthy,
        idle runner not yet at it. Runners busy with a late sample get it before their
        next one (`catch_up`)."""
        self._latest = (version, weights, filter_state)
        targets = [s for s in self._runners.idle_healthy() if s.synced_version != version]
        self.sync.push(targets, version, weights, filter_state)

    def catch_up(self, current: int) -> None:
        """Before asking for samples at version `current`: if a healthy idle runner is not
        at it, push the latest weights again (to every idle runner behind them)."""
        version, weights, filter_state = self._latest
        if weights is None:
            return
        if any(s.synced_version != current for s in self._runners.idle_healthy()):
            self.push(version, weights, filter_state)

    @property
    def last(self) -> dict[str, Any]:
        """How the last push went (tests, benchmarks)."""
        return self.sync.last

    @property
    def fanout(self) -> int:
        return self.sync.fanout

    @fanout.setter
    def fanout(self, fanout: int) -> None:
        self.sync.fanout = max(1, int(fanout))

    @property
    def plane(self) -> Any:
        """This process's weights plane node (None: weights over gRPC only)."""
        return self.sync.plane

    @plane.setter
    def plane(self, node: Any) -> None:
        self.sync.plane = node

    def close(self) -> None:
        self.sync.close()
