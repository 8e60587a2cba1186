"""ftrl.tune.placement: which PENDING trials start, from node and actor dicts as the client
returns them; no cluster."""

from __future__ import annotations

from ftrl.tune.experiment import Trial, TrialStatus
from ftrl.tune.placement import fits, free_resources, start_order, to_start, trial_resources


def trial(i: int, status: TrialStatus = TrialStatus.PENDING, *, cpu: float = 1.0, gpu: float = 0.0,
          queued_at: float = 0.0, started_at: float | None = None) -> Trial:
    return Trial(f"exp-{i}", i, {}, {}, f"/exp/exp-{i}", status=status, queued_at=queued_at, started_at=started_at,
                 resources={"cpu": cpu, "gpu": gpu})


def node(state: str = "ALIVE", cpu: float = 4.0, gpu: float = 0.0) -> dict:
    return {"state": state, "resources": {"cpu": cpu, "gpu": gpu}}


def actor(name: str, node_id: str, cpu: float = 1.0, state: str = "ALIVE", gpu: float = 0.0, **custom: float) -> dict:
    return {"name": name, "node_id": node_id, "state": state, "resources": {"cpu": cpu, "gpu": gpu, **custom}}


def test_the_queue_puts_trials_that_ran_before_first():
    never = trial(0, queued_at=1.0)
    preempted = trial(1, queued_at=9.0, started_at=2.0)
    failed_earlier = trial(2, queued_at=5.0, started_at=3.0)
    later_index = trial(4, queued_at=1.0)
    running = trial(3, TrialStatus.RUNNING, started_at=1.0)
    paused = trial(5, TrialStatus.PAUSED)
    order = start_order([never, preempted, running, later_index, failed_earlier, paused])
    assert [t.index for t in order] == [2, 1, 0, 4]


def test_free_resources_count_alive_nodes_less_other_jobs_running_trials_and_stopping_ones():
    nodes = {"a": node(cpu=4, gpu=1), "b": node(cpu=8), "lost": node("LOST", cpu=16, gpu=4)}
    actors = [
        actor("other/algorithm", "a", cpu=1),  # another job's
        actor("other/env_runner/0", "b", cpu=2, gpu=0),
        actor("other/learner/0", "a", cpu=0, gpu=1),
        actor("gone/algorithm", "b", cpu=3, state="DEAD"),  # dead: holds nothing
        actor("stranded/algorithm", "lost", cpu=5),  # on a node that is not ALIVE
        actor("exp-0/env_runner/0", "b", cpu=2),  # a running trial's: counted through the trial instead
        actor("exp-1/algorithm", "b", cpu=1, ondemand=0.5),  # a trial that yielded, still stopping: holds its room
        actor("exp-1/env_runner/0", "b", cpu=1, state="DEAD"),  # ... and the actor it already released
    ]
    running = [trial(0, TrialStatus.RUNNING, cpu=3)]
    nodes["b"]["resources"]["ondemand"] = 1.0
    free = free_resources(nodes, actors, running)
    assert free == {"cpu": 12 - 1 - 2 - 3 - 1, "gpu": 0.0, "ondemand": 0.5}
    assert free_resources({}, [], []) == {"cpu": 0.0, "gpu": 0.0}


def test_trials_start_in_order_while_they_fit():
    queue = [trial(0, cpu=2), trial(1, cpu=1), trial(2, cpu=1)]
    assert [t.index for t in to_start(queue, {"cpu": 3.0, "gpu": 0.0}, 0, None)] == [0, 1]
    assert [t.index for t in to_start(queue, {"cpu": 10.0}, 0, None)] == [0, 1, 2]
    assert to_start(queue, {"cpu": 1.5}, 0, None) == []  # the front waits; none jumps it


def test_max_concurrent_trials_counts_the_running_ones():
    queue = [trial(i) for i in range(4)]
    assert [t.index for t in to_start(queue, {"cpu": 10.0}, 1, 3)] == [0, 1]
    assert to_start(queue, {"cpu": 10.0}, 3, 3) == []
    assert len(to_start(queue, {"cpu": 10.0}, 3, 0)) == 4  # 0 or None: no cap


def test_gpus_are_placed_like_cpus():
    queue = [trial(0, cpu=1, gpu=1), trial(1, cpu=1, gpu=1)]
    assert [t.index for t in to_start(queue, {"cpu": 8.0, "gpu": 1.0}, 0, None)] == [0]
    assert to_start(queue, {"cpu": 8.0}, 0, None) == []  # no GPU anywhere


def test_fits_and_what_a_trial_holds():
    assert fits({"cpu": 2.0}, {"cpu": 2.0})
    assert fits({"cpu": 0.3 + 0.6}, {"cpu": 0.9})  # float sums are not refused
    assert not fits({"cpu": 1.0, "gpu": 0.5}, {"cpu": 4.0})
    t = trial(0, cpu=3)
    t.resources = {}
    assert trial_resources(t) == {"cpu": 1.0}  # none recorded: one CPU
    held = trial_resources(trial(1, cpu=2))
    held["cpu"] = 99
    assert trial_resources(trial(1, cpu=2)) == {"cpu": 2.0, "gpu": 0.0}


def test_a_cluster_fills_and_the_queue_waits():
    """The pieces together, as the tuner uses them at each pass."""
    trials = [trial(i, cpu=2) for i in range(4)]
    nodes = {"a": node(cpu=5)}
    actors = [actor("other/algorithm", "a", cpu=1)]
    queue = start_order(trials)
    running: list[Trial] = []
    started = to_start(queue, free_resources(nodes, actors, running), 0, None)
    assert [t.index for t in started] == [0, 1]
    for t in started:
        t.status, t.started_at = TrialStatus.RUNNING, 1.0
    running = [t for t in trials if t.status == TrialStatus.RUNNING]
    free = free_resources(nodes, actors, running)
    assert free["cpu"] == 0.0 and to_start(start_order(trials), free, len(running), None) == []
    nodes["b"] = node(cpu=2)  # a node joins
    free = free_resources(nodes, actors, running)
    assert [t.index for t in to_start(start_order(trials), free, len(running), None)] == [2]


def test_custom_resources_are_room_too():
    from ftrl.config import IMPALAConfig
    from ftrl.tune.tuner import trial_resources_of

    config = (IMPALAConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=3, custom_resources_per_env_runner={"spot": 1})
              .learners(num_learners=1, custom_resources_per_learner={"ondemand": 1})
              .resources(num_cpus_for_main_process=1, custom_resources_for_main_process={"ondemand": 0.5}))
    need = trial_resources_of(config)
    assert need == {"cpu": 5.0, "gpu": 0.0, "spot": 3.0, "ondemand": 1.5}  # driver 1 + runners 3 + learner 1
    nodes = {"head": {"state": "ALIVE", "resources": {"cpu": 4.0, "gpu": 0.0, "ondemand": 4.0}},
             "spot": {"state": "ALIVE", "resources": {"cpu": 4.0, "gpu": 0.0, "spot": 2.0}}}
    other = [{"name": "x/env_runner/0", "node_id": "spot", "state": "ALIVE", "resources": {"cpu": 1.0, "spot": 1.0}}]
    free = free_resources(nodes, other, [])
    assert free == {"cpu": 7.0, "gpu": 0.0, "ondemand": 4.0, "spot": 1.0}
    assert not fits(need, free)  # 3 spot wanted, 1 free
    nodes["spot"]["resources"]["spot"] = 8.0
    assert fits(need, free_resources(nodes, other, []))
