"""An experiment on disk: its spec (checked before anything starts), its state
(`experiment.json`, written atomically on every decision) and its lineage
(`lineage.jsonl`, append-only, one row per exploit; ftrl.tune.report reads both for
people).

    EXPDIR/                   = RunConfig.storage_path / RunConfig.name
      experiment.json         spec + trials + the scheduler's state (PBT members, RNG, counters)
      lineage.jsonl           one row per exploit (time, target, donor, checkpoint, age, configs)
      NAME-0/ NAME-1/ ...     one folder per trial: the trial's job output (metrics.jsonl,
                              checkpoints/, result.json) and pinned/ (donor checkpoints kept)

Trial statuses (`TrialStatus`) are Ray Tune's: PENDING (waiting for room; a pre-empted or
failed trial waits at the front of the queue), RUNNING, PAUSED (`Trial.paused_because`:
it yielded its room to a trial behind it in a time-shared PBT population, and waits for
its turn; or the experiment was stopped, and it resumes with it), TERMINATED (reached a
stop criterion), ERROR (failed more than max_failures). The experiment's own status is an `ExperimentStatus`. Both are `StrEnum`s:
experiment.json holds their values, the same strings as ever. Imports no torch.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from ftrl.util.files import atomic_write_json, fsync_dir
from ftrl.wire.errors import ConfigError

log = logging.getLogger(__name__)

EXPERIMENT_FILE = "experiment.json"
LINEAGE_FILE = "lineage.jsonl"
PINNED_DIR = "pinned"
FORMAT = 1
#: Ray Tune's names for row keys, accepted in a stop dict and as time_attr.
ROW_ALIASES = {"training_iteration": "iteration", "timesteps_total": "env_steps_sampled",
               "num_env_steps_sampled": "env_steps_sampled", "time_total_s": "time_s"}
#: stop-dict keys the trial's own driver checks (exact, at the iteration), by job [stop] name
DRIVER_STOPS = {"iteration": "stop_iters", "env_steps_sampled": "stop_timesteps"}
#: The experiment's scheduler actor (ftrl.tune.controller), by import path.
TUNER_CLASS = "ftrl.tune.controller:TuneController"


class TrialStatus(StrEnum):
    """Where a trial is (Ray Tune's names)."""

    PENDING = "PENDING"  # waiting for room (a pre-empted or failed one at the front of the queue)
    RUNNING = "RUNNING"  # its job was submitted (or is followed) on the cluster
    PAUSED = "PAUSED"  # stopped with a checkpoint: yielded its turn, or the experiment was stopped
    TERMINATED = "TERMINATED"  # a stop criterion ended it
    ERROR = "ERROR"  # failed more than max_failures times, or its config does not start

    @property
    def ended(self) -> bool:
        """Whether the trial is over for good (the experiment ends when every trial is)."""
        return self in (TrialStatus.TERMINATED, TrialStatus.ERROR)


class ExperimentStatus(StrEnum):
    """Where the experiment is: PENDING until its tuner first runs, RUNNING, then FINISHED
    (every trial TERMINATED or ERROR) or STOPPED (`stop()`: its trials PAUSED)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    STOPPED = "STOPPED"
    FAILED = "FAILED"  # never written by this version; a reader takes it as final

    @property
    def final(self) -> bool:
        """Whether the experiment has ended (nothing runs for it any more)."""
        return self in FINAL_EXPERIMENT_STATUSES


#: `Trial.paused_because`: it yielded its room to a trial behind it (PBT time-sharing)
PAUSED_TO_YIELD = "yielded its turn"
#: `Trial.paused_because`: the experiment was stopped (`Tuner.restore` resumes it)
PAUSED_STOPPED = "experiment stopped"

FINAL_EXPERIMENT_STATUSES = frozenset({ExperimentStatus.FINISHED, ExperimentStatus.STOPPED, ExperimentStatus.FAILED})


def row_key(key: str) -> str:
    """A metrics-row key from a Ray Tune name (training_iteration -> iteration)."""
    return ROW_ALIASES.get(key, key)


def row_value(row: Mapping[str, Any], key: str) -> Any:
    """The value a metric, stop or time key names in a metrics row, Ray Tune's way: a key
    of the row, or a "/"-separated path into its nested dicts
    ("custom_metrics/pole_angle_mean", "evaluation/episode_return_mean"); None if absent."""
    if key in row:
        return row[key]
    value: Any = row
    for part in key.split("/"):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


@dataclass
class Trial:
    """One member of the experiment: a job named `NAME-INDEX` on the cluster."""

    trial_id: str
    index: int
    config: dict[str, Any]  # the tuned keys' current values
    initial_config: dict[str, Any]
    output_dir: str
    status: TrialStatus = TrialStatus.PENDING
    last_result: dict[str, Any] = field(default_factory=dict)
    best_metric: float | None = None
    num_exploits: int = 0
    num_failures: int = 0
    num_preemptions: int = 0
    num_pauses: int = 0  # turns yielded to trials behind it (time-sharing)
    paused_because: str = ""  # PAUSED: PAUSED_TO_YIELD or PAUSED_STOPPED
    error: str = ""
    node: str = ""
    queued_at: float = field(default_factory=time.time)  # the queue is ordered by this
    started_at: float | None = None
    last_checkpoint: dict[str, Any] | None = None  # path, iteration, time (time_attr), saved_at
    resources: dict[str, float] = field(default_factory=lambda: {"cpu": 1.0})  # held while it runs

    def __post_init__(self) -> None:
        try:
            self.status = TrialStatus(self.status)
        except ValueError:
            raise ConfigError(f"trial {self.trial_id!r} has an unknown status {self.status!r}; "
                              f"statuses: {', '.join(TrialStatus)}") from None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (experiment.json's "trials" entries); the status as its string."""
        return {**self.__dict__, "status": self.status.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Trial:
        """The trial `to_dict` described (fields this version lacks are ignored)."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def read_state(expdir: str | Path) -> dict[str, Any]:
    """experiment.json of `expdir` (ConfigError if it is not an experiment)."""
    path = Path(expdir) / EXPERIMENT_FILE
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{expdir} is not an ftrl tune experiment (no {EXPERIMENT_FILE})") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path} cannot be read: {e}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ConfigError(f"{path} is not an experiment file of format {FORMAT}")
    return state


def write_state(expdir: str | Path, state: dict[str, Any]) -> None:
    """experiment.json, atomically (tmp, fsync, rename)."""
    state["updated_at"] = time.time()
    atomic_write_json(Path(expdir) / EXPERIMENT_FILE, state)


def append_lineage(expdir: str | Path, row: Mapping[str, Any]) -> None:
    """One exploit's row at the end of lineage.jsonl, on disk before this returns."""
    path = Path(expdir) / LINEAGE_FILE
    line = json.dumps(dict(row), sort_keys=True, default=str) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The lines of `path` that are JSON objects; others (a torn last line) are skipped
    with a warning. A missing file is no rows."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as e:
        log.warning("cannot read %s: %s", path, e)
        return []
    rows = []
    for n, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            log.warning("%s line %d is not valid JSON (torn write?); skipped", path, n)
            continue
        if not isinstance(obj, dict):
            log.warning("%s line %d is not a JSON object; skipped", path, n)
            continue
        rows.append(obj)
    return rows


def read_lineage(expdir: str | Path) -> list[dict[str, Any]]:
    """EXPDIR/lineage.jsonl: one dict per exploit, in the order they happened ([] for none)."""
    return read_jsonl(Path(expdir) / LINEAGE_FILE)


def pin_checkpoint(expdir: str | Path, trial_id: str, checkpoint: str | Path) -> Path:
    """Keep a donor's checkpoint for good: a hard link (a copy across file systems) under
    the donor's pinned/ folder, which the trial's checkpoint pruning never touches."""
    src = Path(checkpoint)
    dest_dir = Path(expdir) / trial_id / PINNED_DIR
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / src.name
    if dest.exists():
        return dest
    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        import shutil

        shutil.copyfile(src, tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
    os.replace(tmp, dest)
    fsync_dir(dest_dir)
    return dest
