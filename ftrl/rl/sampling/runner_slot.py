"""What every part of the runner group shares: the record of one remote runner, the
freshness rule for a fragment's weights, and the group's error.

`RunnerSlot` is plain data handed between the parts of `EnvRunnerGroup`
(`ftrl.rl.sampling.runner_group`); each field group is written by one part:

- `state`, `recovery`, and the `ActorSlot` fields (handle, incarnation, failures,
  restarts): the runner set (`runner_set.RunnerSet`);
- `synced_version`: whoever learns which weights the runner holds (a push,
  `runner_weights`; a recovery, `runner_set`; a fragment sampled with other weights,
  `sample_rounds`);
- `plane_address`, `plane_incarnation`: the weight push (`ftrl.rl.weights.sync`);
- `inflight`, `inflight_late`, `inflight_kind`, `fragment_steps`: the part that asked
  (`sample_rounds`, `runner_eval`); `sample_ledger` ends a request, `runner_scale`
  cancels one of a runner scaled away;
- `channel`, `channel_incarnation`: `runner_channels`' functions.
"""

from __future__ import annotations

import concurrent.futures as cf
from dataclasses import dataclass
from typing import Any

from ftrl.rl.actor_group import ActorSlot
from ftrl.wire.errors import FtrlError

ENV_RUNNER_CLASS = "ftrl.rl.sampling.env_runner:EnvRunner"


class EnvRunnerFailureError(FtrlError):
    """Env runners failed beyond what the fault-tolerance config allows."""


def weights_fresh(version: int, current: int, max_lag: int) -> bool:
    """Whether a fragment sampled with weights `version` may be used when the learner is at
    `current`: the same version, or (with `max_lag` > 0) at most `max_lag` versions older."""
    if max_lag <= 0:
        return version == current
    return current - max_lag <= version <= current


@dataclass
class RunnerSlot(ActorSlot):
    """What the group knows about one remote runner (`index` is its worker index, 1-based)."""

    state: str = "new"  # new | healthy | recovering | removed | retired (scaled away)
    synced_version: int = -1
    inflight: cf.Future | None = None
    inflight_late: bool = False
    inflight_kind: str = ""
    recovery: cf.Future | None = None
    plane_address: str = ""  # its weights plane server, for the incarnation below
    plane_incarnation: int = -1
    channel: Any = None  # SampleChannel to `channel_incarnation` (None: not open)
    channel_incarnation: int = -1  # the incarnation the channel (or its failure) is for
    fragment_steps: int = 0  # env steps its last sample brought (0: none yet)

    @property
    def idle(self) -> bool:
        """No request of the group's is out on it."""
        return self.inflight is None
