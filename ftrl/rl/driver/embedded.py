"""The embedded local cluster sized for one job, without importing torch.

`ftrl train` (no --coordinator) runs its job on one: the job's driver is an actor on
it, so this process never needs torch. What each warm spare imports ahead follows the
job: env runners with the numpy inference backend need no torch, so the pool's spares
preload only `ftrl.rl.sampling.env_runner`; the driver (the worker's first actor) gets a spare
of its own that imports the algorithm (and torch) while the cluster is still starting.
"""

from __future__ import annotations

import math
import os
from typing import Any

from ftrl.util.gpus import NVIDIA_PROC_DIR, visible_gpus
from ftrl.wire.errors import ConfigError

#: What every warm spare of a job's cluster imports ahead (no torch).
RUNNER_PRELOAD = "ftrl.rl.sampling.env_runner"
#: The driver actor's module (`ftrl.coordinator.jobs.DRIVER_CLASS`).
DRIVER_MODULE = "ftrl.rl.driver.actor"


def cluster_slots(config: Any) -> int:
    """Worker slots for the job's driver, runners and learners, at least one per CPU."""
    cpus = config.job_resources().get("cpu", 0.0)
    return max(int(cpus + 0.999), os.cpu_count() or 1)


def cluster_custom_resources(config: Any) -> dict[str, float]:
    """The custom resources the job's actors ask for, all of them: the one worker of an
    embedded cluster offers them (on a real cluster, workers advertise theirs)."""
    return {k: v for k, v in config.job_resources().items() if k not in ("cpu", "gpu")}


def cluster_gpus(config: Any, visible: list[str] | None = None) -> int:
    """GPUs the job's worker offers: every GPU this machine shows (CUDA_VISIBLE_DEVICES,
    else the NVIDIA driver) when the job's learners or runners take GPUs, else none.
    ConfigError when they take more than there are: they could never be placed."""
    lrn, run = config.learners_cfg, config.env_runners_cfg
    need = math.ceil(lrn.num_learners * lrn.num_gpus_per_learner
                     + run.num_env_runners * run.num_gpus_per_env_runner - 1e-9)
    if need <= 0:
        return 0
    visible = visible_gpus() if visible is None else visible
    if need > len(visible):
        seen = (f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r}"
                if "CUDA_VISIBLE_DEVICES" in os.environ else str(NVIDIA_PROC_DIR))
        raise ConfigError(
            f"num_learners={lrn.num_learners} x num_gpus_per_learner={lrn.num_gpus_per_learner:g} with "
            f"num_env_runners={run.num_env_runners} x num_gpus_per_env_runner={run.num_gpus_per_env_runner:g} "
            f"needs {need} GPU(s), but this machine shows {len(visible)} (read from {seen}); "
            "set num_gpus_per_learner=0 and num_gpus_per_env_runner=0 to run on CPUs")
    return len(visible)


def runners_use_torch(config: Any) -> bool:
    """Whether the config alone says the runners will infer with torch: the torch
    backend, or a model with no numpy forward (an LSTM, a custom model, a CNN asked for
    by `conv_filters`/`conv_type`, an Atari env's CNN). An image env of one's own gets
    its CNN from its space, which only the runners see: its runners import torch when
    they start (or set `inference_backend="torch"`)."""
    model = config.model_config
    return (config.env_runners_cfg.inference_backend == "torch" or bool(model.use_lstm)
            or bool(model.custom_model) or bool(model.conv_filters) or model.conv_type == "impala"
            or str(config.environment_cfg.env).startswith("atari:"))


def spare_preload(config: Any, driver: bool = True) -> str:
    """The worker's preload spec (ftrl.worker.processes): spares import the env runner,
    and torch when some of them will host torch: learner actors, or runners that infer
    with torch (the worker's fork server imports it once; each spare is a fork of it, so
    a restarted learner or driver starts without importing torch). With `driver`, the
    first actor's spare imports the driver and the algorithm's module, which bring torch."""
    runners = RUNNER_PRELOAD
    if runners_use_torch(config) or config.learners_cfg.num_learners > 0:
        runners += ",torch"
    if not driver:
        return runners
    algorithm_module = str(getattr(config, "algorithm_path", "") or "").partition(":")[0]
    driver_modules = [DRIVER_MODULE, algorithm_module]
    return f"{runners};first:{','.join(m for m in driver_modules if m)}"


def embedded_cluster_for(config: Any, driver: bool = True, **options: Any) -> Any:
    """An (unstarted) embedded LocalCluster for the job; `driver`: its driver runs as
    an actor there (`ftrl train`), not in this process. `options` go to LocalCluster
    (e.g. `state_dir`, `fresh`)."""
    from ftrl.client.cluster import LocalCluster

    gpus = cluster_gpus(config)
    if gpus:
        options["worker_args"] = [*options.get("worker_args", []), "--gpus", str(gpus)]
    custom = cluster_custom_resources(config)
    if custom:
        listed = ",".join(f"{k}={v:g}" for k, v in sorted(custom.items()))
        options["worker_args"] = [*options.get("worker_args", []), "--resources", listed]
    # two warm spares: a killed runner comes back in ~0.2 s instead of a cold start
    return LocalCluster(workers=1, slots=cluster_slots(config), spares=2,
                        preload=spare_preload(config, driver), log_level="WARNING", **options)
