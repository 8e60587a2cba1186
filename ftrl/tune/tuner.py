"""`ftrl.Tuner`: Ray Tune's shape on ftrl's runtime.

    tuner = ftrl.Tuner(
        ftrl.PPOConfig().environment("CartPole-v1"),
        param_space={"lr": ftrl.tune.loguniform(1e-4, 1e-2), "entropy_coeff": ftrl.tune.choice([0.0, 0.01])},
        tune_config=ftrl.TuneConfig(num_samples=4, metric="episode_return_mean", mode="max",
            scheduler=ftrl.tune.PopulationBasedTraining(perturbation_interval=5,
                hyperparam_mutations={"lr": ftrl.tune.loguniform(1e-4, 1e-2)})),
        run_config=ftrl.RunConfig(name="pbt", storage_path="ftrl_results", stop={"iteration": 50}))
    results = tuner.fit()                       # a ResultGrid
    best = results.get_best_result()
    ftrl.Tuner.restore("ftrl_results/pbt").fit()   # after everything died: carries on

Everything is checked before anything starts (unknown keys in the param space or the
mutations, a key PBT cannot change in place, bad distributions, a trial config that
does not validate): ConfigError naming the key. `fit()` writes the experiment's
directory (ftrl.tune.experiment), starts the scheduler as the actor `NAME/tuner`
(ftrl.tune.controller) on the cluster (`client=`, else an embedded local cluster sized
for the trials, as `ftrl train` does), follows it to its end and returns the results.
Ctrl-C stops the experiment with a checkpoint of every running trial (PAUSED; a
restore continues them). Imports no torch.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ftrl.rl.callbacks import check_callbacks
from ftrl.tune import schedulers as sched
from ftrl.tune import search
from ftrl.tune.experiment import (
    EXPERIMENT_FILE,
    FINAL_EXPERIMENT_STATUSES,
    FORMAT,
    TUNER_CLASS,
    ExperimentStatus,
    Trial,
    TrialStatus,
    read_state,
    row_key,
    write_state,
)
from ftrl.wire.errors import ActorDiedError, ConfigError, FailedPreconditionError, FtrlError

log = logging.getLogger(__name__)

#: How many times the runtime restarts the tuner actor in place.
TUNER_MAX_RESTARTS = 20
#: How long `fit()` keeps following a tuner it cannot reach before it gives up.
FOLLOW_OUTAGE_S = 300.0
_NAME_OK = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"


@dataclass
class FailureConfig:
    """Ray Tune's FailureConfig: how often a trial whose job FAILED is retried from its
    newest checkpoint (pre-emptions and node loss never count)."""

    max_failures: int = 3


@dataclass
class TuneConfig:
    """Ray Tune's TuneConfig: samples, scheduler (FIFO by default, or PBT), the metric
    and mode trials are ranked by, how many run at once (None: as many as fit)."""

    num_samples: int = 1
    scheduler: Any = None
    metric: str | None = None
    mode: str | None = None
    max_concurrent_trials: int | None = None
    seed: int | None = None


@dataclass
class RunConfig:
    """Ray Tune's RunConfig: the experiment's name and where it lives (EXPDIR =
    storage_path/name), the stop dict (metrics-row keys; a trial stops when any is
    reached, Ray Tune's rule) and the failure config."""

    name: str | None = None
    storage_path: str | None = None
    stop: Mapping[str, float] | None = None
    failure_config: FailureConfig = field(default_factory=FailureConfig)
    verbose: int = 1


@dataclass
class Result:
    """One trial's outcome (Ray Tune's Result)."""

    trial_id: str
    status: TrialStatus
    config: dict[str, Any]
    metrics: dict[str, Any]
    path: str
    checkpoint: str | None
    error: str | None
    best_metric: float | None = None


class ResultGrid(Sequence[Result]):
    """The trials of an experiment (Ray Tune's ResultGrid)."""

    def __init__(self, experiment_path: str | Path):
        self.experiment_path = str(experiment_path)
        state = read_state(experiment_path)
        self.status = ExperimentStatus(state.get("status") or ExperimentStatus.PENDING)
        self.metric: str = state["metric"]
        self.mode: str = state["mode"]
        self.counters: dict[str, int] = dict(state.get("counters", {}))
        self._results = [_result(t) for t in sorted(state["trials"].values(), key=lambda t: t["index"])]

    def __len__(self) -> int:
        return len(self._results)

    def __getitem__(self, i: Any) -> Any:
        return self._results[i]

    def __iter__(self) -> Iterator[Result]:
        return iter(self._results)

    @property
    def errors(self) -> list[str]:
        return [r.error for r in self._results if r.status == TrialStatus.ERROR and r.error]

    @property
    def num_errors(self) -> int:
        return sum(r.status == TrialStatus.ERROR for r in self._results)

    @property
    def num_terminated(self) -> int:
        return sum(r.status == TrialStatus.TERMINATED for r in self._results)

    def get_best_result(self, metric: str | None = None, mode: str | None = None, scope: str = "last") -> Result:
        """The trial with the best `metric` (default: the experiment's), `scope` "last"
        (its newest value) or "all" (its best value)."""
        metric, mode = metric or self.metric, mode or self.mode
        if mode not in ("max", "min") or scope not in ("last", "all"):
            raise ConfigError(f"mode must be max or min and scope last or all, got {mode!r}, {scope!r}")

        def value(r: Result) -> float:
            v = r.best_metric if scope == "all" and metric == self.metric else r.metrics.get(metric)
            if not isinstance(v, int | float) or math.isnan(v):
                return -math.inf
            return v if mode == "max" else -v

        scored = [r for r in self._results if value(r) > -math.inf]
        if not scored:
            raise FailedPreconditionError(f"no trial reported {metric!r} yet")
        return max(scored, key=value)

    def __repr__(self) -> str:
        return f"ResultGrid({self.experiment_path!r}, {len(self)} trials, {self.status})"


def _result(t: dict[str, Any]) -> Result:
    ckpts = sorted((Path(t["output_dir"]) / "checkpoints").glob("checkpoint_*.ftrl"))
    return Result(trial_id=t["trial_id"], status=TrialStatus(t["status"]), config=dict(t["config"]),
                  metrics=dict(t.get("last_result") or {}), path=t["output_dir"],
                  checkpoint=str(ckpts[-1]) if ckpts else None, error=t.get("error") or None,
                  best_metric=t.get("best_metric"))


# --------------------------------------------------------------------------- building the experiment


def trial_resources_of(config: Any) -> dict[str, float]:
    """What one trial holds while it runs: what its driver, runners and learners take
    (`AlgorithmConfig.job_resources`: CPUs, GPUs, custom resources; a trial that samples
    and learns in its driver counts as one CPU)."""
    need = config.job_resources()
    return {**need, "cpu": max(1.0, need.get("cpu", 0.0)), "gpu": need.get("gpu", 0.0)}


def build_experiment(config: Any, param_space: Mapping[str, Any] | None, tune_config: TuneConfig,
                     run_config: RunConfig) -> dict[str, Any]:
    """The experiment's first state (experiment.json), every input checked first."""
    from ftrl.client.jobs import job_spec, job_to_dict
    from ftrl.config.live import check_live, check_live_keys, mutable_keys

    spec = job_spec(config)
    base = spec.config
    algo = base.algo_name
    valid = set(base.to_dict()) - {"algo"}
    space = dict(param_space or {})
    search.check_param_space(space, valid)
    scheduler = tune_config.scheduler if tune_config.scheduler is not None else sched.FIFOScheduler()
    if not isinstance(scheduler, sched.FIFOScheduler | sched.PopulationBasedTraining):
        raise ConfigError(f"scheduler must be ftrl.tune.FIFOScheduler or PopulationBasedTraining, "
                          f"not {type(scheduler).__name__}")
    metric = tune_config.metric or getattr(scheduler, "metric", None) or "episode_return_mean"
    mode = tune_config.mode or getattr(scheduler, "mode", None) or "max"
    if mode not in ("max", "min"):
        raise ConfigError(f"mode must be 'max' or 'min', got {mode!r}")
    live = sorted(mutable_keys(algo))  # what an exploit may send
    if isinstance(scheduler, sched.PopulationBasedTraining):
        # a copy (the caller's object is left as it is); a metric or mode that differs from
        # the TuneConfig's is refused
        scheduler = scheduler.with_metric(tune_config.metric, tune_config.mode).with_metric(metric, mode)
        if scheduler.seed is None:
            scheduler.seed = tune_config.seed
        scheduler.validate(valid)
        for key in scheduler.hyperparam_mutations:
            try:
                check_live_keys(algo, [key])
            except ConfigError as e:
                raise ConfigError(f"hyperparam_mutations[{key!r}]: PBT changes it in place, but {e}") from None
    if not isinstance(tune_config.num_samples, int) or tune_config.num_samples < 1:
        raise ConfigError(f"num_samples must be a positive integer, got {tune_config.num_samples!r}")
    mct = tune_config.max_concurrent_trials
    if mct is not None and (not isinstance(mct, int) or mct < 1):
        raise ConfigError(f"max_concurrent_trials must be a positive integer or None, got {mct!r}")
    stop = {}
    for key, bound in dict(run_config.stop or {}).items():
        if not isinstance(bound, int | float) or isinstance(bound, bool):
            raise ConfigError(f"stop[{key!r}] must be a number, got {bound!r}")
        stop[row_key(str(key))] = bound
    failures = run_config.failure_config.max_failures
    if not isinstance(failures, int) or failures < 0:
        raise ConfigError(f"max_failures must be a non-negative integer, got {failures!r}")
    name = run_config.name or f"{algo.lower()}-tune"
    if not name or any(c not in _NAME_OK for c in name) or len(name) > 60:
        raise ConfigError(f"experiment name {name!r} must be 1 to 60 characters of letters, digits, '_', '.', '-'")
    expdir = Path(run_config.storage_path or "ftrl_results").expanduser().absolute() / name
    variants = search.generate_variants(space, tune_config.num_samples, tune_config.seed)
    trials: dict[str, dict[str, Any]] = {}
    for i, variant in enumerate(variants):
        tid = f"{name}-{i}"
        cfg = base.copy()
        try:
            cfg.update_from_dict(variant)
            cfg.validate()
            check_callbacks(cfg)
            if isinstance(scheduler, sched.PopulationBasedTraining):  # e.g. lr under an lr_schedule
                held = cfg.to_dict()
                check_live(cfg, {k: held[k] for k in scheduler.hyperparam_mutations})
        except ConfigError as e:
            raise ConfigError(f"trial {tid} ({variant}): {e}") from None
        trials[tid] = Trial(trial_id=tid, index=i, config=dict(variant), initial_config=dict(variant),
                            output_dir=str(expdir / tid), resources=trial_resources_of(cfg)).to_dict()
    return {
        "format": FORMAT, "name": name, "status": ExperimentStatus.PENDING, "metric": metric, "mode": mode,
        "time_attr": getattr(scheduler, "time_attr", "iteration"), "scheduler": scheduler.to_dict(),
        "param_keys": list(space), "trials": trials,
        "spec": {"base_job": job_to_dict(spec), "param_space": search.param_space_to_wire(space),
                 "num_samples": tune_config.num_samples, "max_concurrent_trials": mct,
                 "seed": tune_config.seed, "stop": stop, "max_failures": failures,
                 "live_keys": live},
        "counters": {}, "started_at": time.time(), "experiment_dir": str(expdir),
    }


# --------------------------------------------------------------------------- the Tuner


class Tuner:
    """Ray Tune's Tuner for ftrl jobs. `config`: the base job (an AlgorithmConfig, a
    JobSpec, a job dict or a job TOML path); `param_space`: config keys to tune (values:
    constants, `grid_search`, or distributions); `client`: a cluster (default: an
    embedded local one for the length of `fit()`)."""

    def __init__(self, config: Any = None, *, param_space: Mapping[str, Any] | None = None,
                 tune_config: TuneConfig | None = None, run_config: RunConfig | None = None,
                 client: Any = None, _restore_path: str | Path | None = None):
        self.client = client
        if _restore_path is not None:
            self.experiment_path = Path(_restore_path).expanduser().absolute()
            self._state = read_state(self.experiment_path)
            self._fresh = False
        else:
            self._state = build_experiment(config, param_space, tune_config or TuneConfig(),
                                           run_config or RunConfig())
            self.experiment_path = Path(self._state["experiment_dir"])
            self._fresh = True
        self.run_config = run_config or RunConfig()
        self.name: str = self._state["name"]

    @classmethod
    def restore(cls, path: str | Path, client: Any = None, **_: Any) -> Tuner:
        """Continue the experiment in `path` (its scheduler state, trials and lineage)."""
        return cls(client=client, _restore_path=path)

    @classmethod
    def can_restore(cls, path: str | Path) -> bool:
        return (Path(path) / EXPERIMENT_FILE).exists()

    def get_results(self) -> ResultGrid:
        return ResultGrid(self.experiment_path)

    def fit(self) -> ResultGrid:
        """Run the experiment to its end (or Ctrl-C: a stop with checkpoints); its results."""
        if self._fresh:
            if self.can_restore(self.experiment_path):
                raise FailedPreconditionError(
                    f"{self.experiment_path} already holds an experiment; `ftrl.Tuner.restore(path)` "
                    "(`ftrl tune EXPERIMENT.toml --resume`) continues it, or choose another name")
            self.experiment_path.mkdir(parents=True, exist_ok=True)
            write_state(self.experiment_path, self._state)
            self._fresh = False
        elif self._state.get("status") == ExperimentStatus.FINISHED:
            return self.get_results()
        if self.client is not None:
            self._run(self.client)
        else:
            with self._embedded_cluster() as cluster:
                self._run(cluster.client(), after=lambda: cluster.wait_nodes(list(cluster.worker_procs)))
        return self.get_results()

    def _embedded_cluster(self) -> Any:
        from ftrl.client.cluster import LocalCluster
        from ftrl.config import load_job
        from ftrl.rl.driver.embedded import cluster_gpus, spare_preload

        state = self._state
        config = load_job(data=state["spec"]["base_job"]).config
        trials = sorted(state["trials"].values(), key=lambda t: t["index"])
        mct = state["spec"].get("max_concurrent_trials") or len(trials)
        room = sorted((t.get("resources") or {"cpu": 1.0} for t in trials), key=lambda r: r.get("cpu", 1.0))[-mct:]
        cpus = sum(r.get("cpu", 1.0) for r in room)
        custom: dict[str, float] = {}  # the custom resources the trials' roles ask for, offered
        for need in room:
            for key, amount in need.items():
                if key not in ("cpu", "gpu"):
                    custom[key] = custom.get(key, 0.0) + float(amount)
        options: dict[str, Any] = {"worker_args": []}
        gpus = cluster_gpus(config)
        if gpus:
            options["worker_args"] += ["--gpus", str(gpus)]
        if custom:
            options["worker_args"] += ["--resources", ",".join(f"{k}={v:g}" for k, v in sorted(custom.items()))]
        return LocalCluster(workers=1, slots=max(math.ceil(cpus), os.cpu_count() or 1), spares=2,
                            preload=spare_preload(config, True), log_level="WARNING", fresh=True,
                            state_dir=str(self.experiment_path / ".ftrl-cluster"), **options)

    def _run(self, client: Any, after: Any = None) -> None:
        tuner_name = f"{self.name}/tuner"
        handle = client.create_actor(TUNER_CLASS, name=tuner_name,
                                     kwargs={"experiment_dir": str(self.experiment_path)},
                                     max_restarts=TUNER_MAX_RESTARTS, resources={"cpu": 0.0},
                                     max_concurrency=4, get_if_exists=True, timeout=120.0)
        if after is not None:
            after()
        try:
            status = self._follow(handle)
        except KeyboardInterrupt:
            print(f"ftrl tune: stopping {self.name}: every running trial stops with a checkpoint "
                  "(again to abort)", file=sys.stderr)
            handle.call("stop")
            status = self._follow(handle)
        finally:
            self._state = read_state(self.experiment_path)
        if status.get("done"):
            try:
                client.kill_actor(tuner_name, "experiment ended")
            except FtrlError as e:
                log.info("the tuner actor of %s: %s", self.name, e)
        if status.get("error") and status.get("status") not in FINAL_EXPERIMENT_STATUSES:
            raise FtrlError(f"the tuner of {self.name} failed: {status['error'].splitlines()[0]}")

    def _follow(self, handle: Any) -> dict[str, Any]:
        """The tuner's status until the experiment ends; a tuner restarting in place is
        waited for (FOLLOW_OUTAGE_S at most), a DEAD one (out of restarts) is an error."""
        seq, last_line, status = -1, 0.0, {}
        outage_since: float | None = None
        while True:
            try:
                status = handle.options(timeout=40.0).call("wait_status", seq, 10.0)
                outage_since = None
            except ActorDiedError as e:
                raise FtrlError(f"the tuner of {self.name} is dead: {e}; `Tuner.restore` / `ftrl tune "
                                "--resume` continues the experiment from its directory") from None
            except FtrlError as e:  # the tuner restarts in place: keep following
                outage_since = outage_since or time.monotonic()
                if time.monotonic() - outage_since > FOLLOW_OUTAGE_S:
                    raise
                log.info("following %s: %s", self.name, e)
                time.sleep(1.0)
                continue
            seq = status["seq"]
            if self.run_config.verbose and time.monotonic() - last_line >= 2.0:
                print(progress_line(status), file=sys.stderr, flush=True)
                last_line = time.monotonic()
            if status.get("done") and status.get("status") in FINAL_EXPERIMENT_STATUSES:
                if self.run_config.verbose:
                    print(progress_line(status), file=sys.stderr, flush=True)
                return status
            if status.get("done"):  # drained: its next incarnation starts elsewhere
                time.sleep(0.5)


def progress_line(status: dict[str, Any]) -> str:
    """One line: trials by status, exploits, skips, pre-emptions, the best trial."""
    trials = status.get("trials", {})
    counts: dict[str, int] = {}
    for t in trials.values():
        counts[t["status"]] = counts.get(t["status"], 0) + 1
    best = max(((tid, t["best_metric"]) for tid, t in trials.items() if t.get("best_metric") is not None),
               key=lambda x: x[1], default=None)
    c = status.get("counters", {})
    parts = [f"{status.get('name')}: {status.get('status')}", " ".join(f"{k} {v}" for k, v in sorted(counts.items())),
             f"exploits {c.get('num_exploits', 0)} skips {c.get('num_donor_skips', 0)} "
             f"pre-emptions {c.get('num_preemptions', 0)} failures {c.get('num_trial_failures', 0)} "
             f"pauses {c.get('num_pauses', 0)}"]
    if best is not None:
        parts.append(f"best {best[0]} {best[1]:.1f}")
    return " | ".join(parts)


# --------------------------------------------------------------------------- experiment files


_TUNE_KEYS = ("name", "storage_path", "num_samples", "metric", "mode", "max_concurrent_trials", "seed",
              "max_failures", "stop", "param_space", "scheduler")


def load_experiment_file(path: str | Path, storage_path: str | None = None) -> Tuner:
    """A Tuner from an experiment TOML: a job file (algo, config tables, [stop]) plus a
    [tune] table (name, storage_path, num_samples, metric, mode, max_concurrent_trials,
    seed, max_failures, [tune.stop], [tune.param_space], [tune.scheduler] with `kind`
    = "pbt" or "fifo" and the scheduler's knobs)."""
    from ftrl.config.builder import read_toml
    from ftrl.config.fields import suggest

    raw = dict(read_toml(path))
    tune = raw.pop("tune", None)
    if not isinstance(tune, Mapping):
        raise ConfigError(f"{path}: an experiment file needs a [tune] table (param_space, scheduler, ...)")
    for key in tune:
        if key not in _TUNE_KEYS:
            raise ConfigError(f"unknown key {key!r} in [tune]{suggest(key, _TUNE_KEYS)}")
    scheduler_table = dict(tune.get("scheduler") or {"kind": "fifo"})
    scheduler_table.setdefault("kind", "pbt")
    scheduler = sched.scheduler_from_dict(scheduler_table)
    tune_config = TuneConfig(num_samples=tune.get("num_samples", 1), scheduler=scheduler,
                             metric=tune.get("metric"), mode=tune.get("mode"),
                             max_concurrent_trials=tune.get("max_concurrent_trials"), seed=tune.get("seed"))
    run_config = RunConfig(name=tune.get("name") or Path(path).stem.replace(" ", "_"),
                           storage_path=storage_path or tune.get("storage_path"), stop=tune.get("stop"),
                           failure_config=FailureConfig(max_failures=tune.get("max_failures", 3)))
    return Tuner(raw, param_space=tune.get("param_space"), tune_config=tune_config, run_config=run_config)
