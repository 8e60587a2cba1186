"""The embedded local cluster sized for one job, without importing torch.

`ftrl train` (no --coordinator) runs its job on one: the job's driver is an actor on
it, so this process never needs torch. What each warm spare imports ahead follows the
job: env runners with the numpy inference backend need no torch, so the pool's spares
preload only `ftrl.rl.env_runner`; the driver (the worker's first actor) gets a spare
of its own that imports the algorithm (and torch) while the cluster is still starting.
"""

from __future__ import annotations

import os
from typing import Any

#: What every warm spare of a job's cluster imports ahead (no torch).
RUNNER_PRELOAD = "ftrl.rl.env_runner"
#: The driver actor's module (`ftrl.coordinator.jobs.DRIVER_CLASS`).
DRIVER_MODULE = "ftrl.rl.driver"


def cluster_slots(config: Any) -> int:
    """Worker slots for the job's runners and learners (the driver takes none), at least
    one per CPU."""
    run = config.env_runners_cfg
    ev = config.evaluation_cfg
    cpus = run.num_env_runners * run.num_cpus_per_env_runner
    cpus += config.learners_cfg.num_learners * config.learners_cfg.num_cpus_per_learner
    if ev.evaluation_interval is not None:
        cpus += ev.evaluation_num_env_runners * run.num_cpus_per_env_runner
    return max(int(cpus + 0.999), os.cpu_count() or 1)


def spare_preload(config: Any, driver: bool = True) -> str:
    """The worker's preload spec (ftrl.worker.processes): spares import the env runner
    (and torch only when the runners infer with torch); with `driver`, the first actor's
    spare imports the driver and the algorithm's module, which bring torch."""
    runners = RUNNER_PRELOAD
    if config.env_runners_cfg.inference_backend == "torch":
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

    # two warm spares: a killed runner comes back in ~0.2 s instead of a cold start
    return LocalCluster(workers=1, slots=cluster_slots(config), spares=2,
                        preload=spare_preload(config, driver), log_level="WARNING", **options)
