"""How the driver reaches its learner: on the training thread itself (`DirectAccess`:
PPO, IMPALA's deterministic mode) or through a learner thread (`AsyncLearner`,
ftrl.rl.driver.async_learner: IMPALA, APPO). Either way the learner behind it is the
in-process Learner (`num_learners=0`) or the elastic LearnerGroup, and the driver's
parts use one interface, `LearnerAccess`:

    version, weights = access.weights_for_runners()   # what sync_weights pushes
    access.get_weights(); access.get_state()          # reads, never mid-update
    with access.paused():                              # no update runs meanwhile
        learner.set_state(...); access.publish()       # an exploit: the runners' next weights

`scale_learner_group` resizes a learner group (checked first: learners that share a GPU
cannot form a group of more than one).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from ftrl.config import AlgorithmConfig, check_learner_gpus
from ftrl.wire.errors import ConfigError


class LearnerAccess(Protocol):
    """The learner as the driver reaches it (module docstring)."""

    #: the learner behind it: the in-process Learner or the LearnerGroup
    learner: Any
    #: how many versions behind the learner a sample may be and still be learned on: an
    #: exploit moves the version further than this
    stale_version_gap: int

    @property
    def version(self) -> int:
        """The learner's weights version."""

    def weights_for_runners(self) -> tuple[int, np.ndarray]:
        """(version, weights) the runners sample with next."""

    def get_weights(self) -> tuple[int, np.ndarray]:
        """The learner's (version, flat weights), read between two updates."""

    def get_state(self) -> dict[str, Any]:
        """The learner's state, read between two updates."""

    def at_rest(self) -> contextlib.AbstractContextManager:
        """Held while the driver's thread reads the learner: never mid-update."""

    def paused(self) -> contextlib.AbstractContextManager:
        """Held while the driver's thread changes the learner's state or
        hyperparameters: no update runs meanwhile."""

    def publish(self) -> None:
        """The learner's weights changed outside an update: they are the runners' next."""

    def replace_learner(self, learner: Any, *, in_process: bool) -> None:
        """Go on with another learner (new learners made for a changed learners key), held
        paused by the caller; `in_process`: it runs in this process (reads need the lock)."""

    def start(self) -> None:
        """Begin (the learner is as the run starts from: resumed, restored)."""

    def stop(self) -> None:
        """End: no update runs after this returns."""


class DirectAccess:
    """The learner updated on the driver's own thread: nothing to hold, and the runners
    always get the learner's newest weights. `stale_version_gap` reads the config key
    it comes from at each use (an exploit may have changed it)."""

    def __init__(self, learner: Any, stale_version_gap: Callable[[], int]) -> None:
        self.learner = learner
        self._stale_version_gap = stale_version_gap

    @property
    def stale_version_gap(self) -> int:
        return int(self._stale_version_gap())

    @property
    def version(self) -> int:
        return int(self.learner.version)

    def weights_for_runners(self) -> tuple[int, np.ndarray]:
        return self.learner.get_weights()

    def get_weights(self) -> tuple[int, np.ndarray]:
        return self.learner.get_weights()

    def get_state(self) -> dict[str, Any]:
        return self.learner.get_state()

    def at_rest(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def paused(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def publish(self) -> None:
        """Nothing to do: the runners get the learner's weights."""

    def replace_learner(self, learner: Any, *, in_process: bool) -> None:
        self.learner = learner

    def start(self) -> None:
        """Nothing to start."""

    def stop(self) -> None:
        """Nothing to stop."""


class ScalableGroup(Protocol):
    """A learner group, as far as resizing it goes."""

    def scale(self, num_learners: int) -> None: ...


def scale_learner_group(config: AlgorithmConfig, group: ScalableGroup | None, num_learners: int) -> None:
    """Grow or shrink `group` to `num_learners` at its next step boundary (thread-safe);
    ConfigError when the run has no learner group or the learners' GPU share forbids it."""
    if group is None:
        raise ConfigError("this run has no learner group (num_learners=0)")
    check_learner_gpus(dataclasses.replace(config.learners_cfg, num_learners=int(num_learners)))
    group.scale(num_learners)
