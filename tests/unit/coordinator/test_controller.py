"""Failover policy of the coordinator's Controller, driven without a network."""

from __future__ import annotations

import pytest

from ftrl.coordinator import placement
from ftrl.coordinator.controller import LOCAL_RESTART_RANGE, Controller, ControllerConfig
from ftrl.coordinator.records import ActorState, NodeState
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    StaleIncarnationError,
)
from ftrl.wire.limits import MAX_KWARGS_BYTES
from tests.unit.coordinator.controller_harness import Harness

EXITED, STARTED, START_FAILED, HUNG, STOPPED = (
    pb.REPORT_EXITED, pb.REPORT_STARTED, pb.REPORT_START_FAILED, pb.REPORT_HUNG, pb.REPORT_STOPPED)


def alive(h: Harness, name: str, **create) -> tuple[str, int]:
    """Create `name`, report it started; returns (node, incarnation). Leaves the quick-crash window."""
    h.create(name, **create)
    where = h.started(name)
    h.now += 5.0  # it has been up a while: a death now is not a crash loop
    h.heartbeat(*h.links)
    return where


# ---------------------------------------------------------------- configuration


def test_config_validation():
    with pytest.raises(InvalidArgumentError, match="heartbeat"):
        Controller(ControllerConfig(heartbeat_interval_s=5, heartbeat_timeout_s=5))
    with pytest.raises(InvalidArgumentError):
        Controller(ControllerConfig(heartbeat_interval_s=0))


# ---------------------------------------------------------------- placement


def test_placement_by_cpu_gpu_and_custom_resources():
    h = Harness()
    h.register("small", cpu=1)
    h.register("gpu", cpu=4, gpu=1)
    h.register("sim", cpu=1, sim=4)

    h.create("g", resources={"gpu": 1})
    h.create("s", resources={"sim": 3, "cpu": 1})
    h.create("c")  # default {"cpu": 1}: the node with the most free cpu
    assert h.last_start("g")[0] == "gpu"
    assert h.last_start("s")[0] == "sim"
    assert h.last_start("c")[0] == "gpu"
    assert dict(h.last_start("c")[1].spec.resources) == {"cpu": 1.0}
    for name in ("g", "s", "c"):
        assert h.c.actors[name].state == ActorState.STARTING
    nodes = h.c.nodes
    assert nodes["gpu"].available() == {"cpu": 3.0, "gpu": 0.0}
    assert nodes["sim"].available() == {"cpu": 0.0, "gpu": 0.0, "sim": 1.0}
    assert nodes["gpu"].actors == {"g", "c"}

    # a second gpu actor has nowhere to go
    h.create("g2", resources={"gpu": 1})
    assert h.c.actors["g2"].state == ActorState.PENDING
    assert h.starts("g2") == []


def test_placement_spreads_by_free_cpu():
    h = Harness()
    h.register("a", cpu=2)
    h.register("b", cpu=2)
    for i in range(4):
        h.create(f"x{i}")
    placed = [h.last_start(f"x{i}")[0] for i in range(4)]
    assert sorted(placed) == ["a", "a", "b", "b"]


def test_pack_puts_a_role_on_as_few_nodes_as_fit_and_spread_on_as_many():
    h = Harness()
    h.register("a", cpu=3)
    h.register("b", cpu=3)
    for i in range(3):  # PACK: the second and third runner join the first one's node
        h.create(f"job/env_runner/{i}", placement_strategy="PACK")
    packed = {h.last_start(f"job/env_runner/{i}")[0] for i in range(3)}
    assert len(packed) == 1
    h.create("job/env_runner/3", placement_strategy="PACK")  # full: the next node
    assert h.last_start("job/env_runner/3")[0] not in packed
    h2 = Harness()
    h2.register("a", cpu=4)
    h2.register("b", cpu=4)
    h2.create("other", resources={"cpu": 1})  # "a" (or "b") has less free CPU now
    for i in range(4):
        h2.create(f"job/learner/{i}", placement_strategy="SPREAD")
    spread = [h2.last_start(f"job/learner/{i}")[0] for i in range(4)]
    assert sorted(spread) == ["a", "a", "b", "b"]
    with pytest.raises(InvalidArgumentError, match="placement_strategy must be PACK, SPREAD"):
        h2.create("x", placement_strategy="RANDOM")


def test_a_custom_resource_no_node_offers_waits_pending():
    h = Harness()
    h.register("spot", cpu=4, spot=4)
    h.create("job/algorithm", resources={"cpu": 0, "ondemand": 0.5})
    assert h.c.actors["job/algorithm"].state == ActorState.PENDING
    h.register("head", cpu=1, ondemand=1)
    h.advance(0.1)
    assert h.last_start("job/algorithm")[0] == "head"


def test_pending_until_a_node_with_room_appears():
    h = Harness()
    rec = h.create("early")  # no node at all
    assert rec.state == ActorState.PENDING
    h.register("tiny", cpu=1)
    h.create("big", resources={"cpu": 3})
    assert h.c.actors["big"].state == ActorState.PENDING
    assert h.last_start("early")[0] == "tiny"
    h.advance(0.1)
    assert h.starts("big") == []

    # a registered but not yet connected node gets nothing
    h.register("large", cpu=4, connect=False)
    h.advance(0.1)
    assert h.starts("big") == []
    h.connect("large")
    node_id, start = h.last_start("big")
    assert node_id == "large" and start.incarnation == 1
    assert start.local_until == 1 + LOCAL_RESTART_RANGE
    h.started("big")
    assert h.c.actors["big"].state == ActorState.ALIVE
    assert h.event_types("big") == ["CREATED", "ALIVE"]


def test_start_is_retried_when_the_send_fails():
    h = Harness()
    h.register("a")
    h.links.discard("a")  # the stream is broken but the node is not lost yet
    h.create("x")
    assert h.starts("x") == [] and h.c.actors["x"].state == ActorState.PENDING
    h.links.add("a")
    h.advance(0.05)
    assert h.last_start("x")[0] == "a"
    assert h.c.actors["x"].state == ActorState.STARTING


# ---------------------------------------------------------------- restarts in place


def test_local_restart_counts_and_emits_restarted():
    h = Harness()
    h.register("a")
    node_id, inc = alive(h, "x", max_restarts=3)
    rec = h.c.actors["x"]
    for n in range(1, 4):
        h.report(node_id, "x", inc, EXITED, exit_code=-9, reason="killed by signal SIGKILL",
                 restarting_locally=True, next_incarnation=inc + 1)
        assert rec.state == ActorState.RESTARTING
        assert (rec.restarts, rec.incarnation, rec.node_id) == (n, inc + 1, "a")
        inc += 1
        h.report(node_id, "x", inc, STARTED, pid=100 + n, address="127.0.0.1:9")
        assert rec.state == ActorState.ALIVE and rec.pid == 100 + n
        h.now += 5
        h.heartbeat("a")
    assert h.c.nodes["a"].failures == 3
    assert h.event_types("x") == ["CREATED", "ALIVE"] + ["DIED", "RESTARTED"] * 3
    assert h.starts("x")[1:] == []  # the worker restarted it; the coordinator sent nothing more

    # out of restarts: a 4th local restart is refused and the actor is DEAD
    h.report(node_id, "x", inc, EXITED, exit_code=-9, reason="killed by signal SIGKILL",
             restarting_locally=True, next_incarnation=inc + 1)
    assert rec.state == ActorState.DEAD
    assert "killed by signal SIGKILL" in rec.death_reason
    assert "no restarts left (max_restarts=3)" in rec.death_reason
    (_, stop), = h.stops("x")
    assert stop.incarnation == inc + 1
    assert h.c.nodes["a"].available()["cpu"] == 2.0


def test_coordinator_restarts_in_place_when_the_worker_does_not():
    h = Harness()
    h.register("a")
    h.register("b")
    node_id, inc = alive(h, "x", max_restarts=5)
    h.report(node_id, "x", inc, EXITED, exit_code=1, reason="exited with code 1")
    rec = h.c.actors["x"]
    assert rec.restarts == 1 and rec.incarnation == inc + 1
    again, start = h.last_start("x")
    assert again == node_id and start.incarnation == inc + 1 and start.restarts == 1
    h.started("x")
    assert rec.state == ActorState.ALIVE
    assert h.event_types("x")[-2:] == ["DIED", "RESTARTED"]


def test_crash_loop_backs_off():
    h = Harness(restart_backoff_base_s=0.5, restart_backoff_cap_s=2.0, quick_crash_s=1.0)
    h.register("a")
    h.create("x")
    delays = []
    for _ in range(5):
        _, inc = h.started("x")
        n_starts = len(h.starts("x"))
        h.report("a", "x", inc, EXITED, exit_code=1, reason="boom")  # right after starting
        start_at = h.c.actors["x"].start_at
        delays.append(round(start_at - h.now, 6))
        if start_at > h.now:
            h.advance((start_at - h.now) / 2)
            assert len(h.starts("x")) == n_starts, "restarted before its backoff ended"
            h.heartbeat("a")
            h.advance(start_at - h.now + 1e-6)
        h.heartbeat("a")
        assert len(h.starts("x")) == n_starts + 1
    assert delays == [0.0, 0.5, 1.0, 2.0, 2.0]


def test_max_restarts_zero_dies_at_once_with_reason():
    h = Harness()
    h.register("a")
    node_id, inc = alive(h, "x", max_restarts=0)
    h.report(node_id, "x", inc, EXITED, exit_code=-11, reason="killed by signal SIGSEGV\n--- log ---\nsegv")
    rec = h.c.actors["x"]
    assert rec.state == ActorState.DEAD
    first_line = rec.death_reason.splitlines()[0]
    assert first_line == "killed by signal SIGSEGV; no restarts left (max_restarts=0)"
    assert "segv" in rec.death_reason
    assert h.event_types("x")[-2:] == ["DIED", "DEAD"]
    assert len(h.starts("x")) == 1
    # the name can be used again; the new actor's incarnation continues the old count
    rec2 = h.create("x")
    assert rec2.incarnation == inc + 1 and rec2.state == ActorState.STARTING


def test_unlimited_restarts():
    h = Harness(max_node_failures=-1)
    h.register("a")
    node_id, inc = alive(h, "x", max_restarts=-1)
    for _ in range(50):
        h.report(node_id, "x", inc, EXITED, exit_code=1, reason="bye")
        h.advance(2.5)  # past any restart backoff
        h.heartbeat("a")
        node_id, inc = h.started("x")
        h.now += 2
        h.heartbeat("a")
    rec = h.c.actors["x"]
    assert rec.state == ActorState.ALIVE and rec.restarts == 50 and rec.incarnation == 51
    assert h.c.nodes["a"].state == NodeState.ALIVE


def test_duplicate_reports_are_handled_once():
    h = Harness()
    h.register("a")
    node_id, inc = alive(h, "x", max_restarts=5)
    for _ in range(3):
        h.report(node_id, "x", inc, EXITED, exit_code=1, reason="dup")
    rec = h.c.actors["x"]
    assert rec.restarts == 1 and rec.incarnation == inc + 1
    assert h.event_types("x").count("DIED") == 1
    assert h.c.nodes["a"].failures == 1
    assert len(h.starts("x")) == 2
    for _ in range(3):
        h.started("x")
    assert h.event_types("x").count("RESTARTED") == 1
    # a late report about the replaced incarnation changes nothing
    h.report(node_id, "x", inc, EXITED, exit_code=2, reason="late")
    assert rec.state == ActorState.ALIVE and rec.restarts == 1


def test_hung_report_emits_died_and_exit_restarts():
    h = Harness()
    h.register("a")
    node_id, inc = alive(h, "x")
    h.report(node_id, "x", inc, HUNG, reason="no ping answer for 2s")
    died = [e for e in h.c.events.recent() if e.type == pb.EVENT_DIED]
    assert died and died[-1].message.startswith("hung:")
    h.report(node_id, "x", inc, EXITED, exit_code=-9, reason="did not answer pings; killed",
             restarting_locally=True, next_incarnation=inc + 1)
    assert h.c.actors["x"].incarnation == inc + 1


def test_stopped_report_is_not_a_failure():
    h = Harness()
    h.register("a")
    node_id, inc = alive(h, "x")
    h.report(node_id, "x", inc, STOPPED, reason="asked to")
    assert h.c.actors["x"].state == ActorState.ALIVE and h.c.nodes["a"].failures == 0


def test_start_failed_first_time_is_dead_with_error_type():
    h = Harness()
    h.register("a")
    h.create("x", class_path="nope.module:Thing", max_restarts=-1)
    node_id, start = h.last_start("x")
    h.report(node_id, "x", start.incarnation, START_FAILED, error_type="ImportError",
             reason="ImportError: cannot import module 'nope.module'")
    rec = h.c.actors["x"]
    assert rec.state == ActorState.DEAD
    assert rec.error_type == "ImportError"
    assert "failed to start" in rec.death_reason and "nope.module" in rec.death_reason
    assert h.c.nodes["a"].available()["cpu"] == 2.0


def test_start_failed_after_it_once_served_is_restarted():
    h = Harness()
    h.register("a")
    node_id, inc = alive(h, "x", max_restarts=2)
    h.report(node_id, "x", inc, EXITED, exit_code=1, reason="gone")
    _, start = h.last_start("x")
    h.report(node_id, "x", start.incarnation, START_FAILED, error_type="OSError", reason="OSError: disk")
    rec = h.c.actors["x"]
    assert rec.state == ActorState.RESTARTING and rec.restarts == 2


def test_kill_actor():
    h = Harness()
    h.register("a")
    node_id, inc = alive(h, "x")
    rec = h.c.kill_actor("x", "test is done")
    assert rec.state == ActorState.DEAD and rec.death_reason == "killed: test is done"
    (stop_node, stop), = h.stops("x")
    assert stop_node == node_id and stop.incarnation == inc and not stop.fenced
    assert h.c.nodes["a"].actors == set()
    assert h.c.kill_actor("x").state == ActorState.DEAD  # idempotent
    with pytest.raises(NotFoundError):
        h.c.kill_actor("nobody")
    with pytest.raises(NotFoundError):
        h.c.get_actor("nobody")


# ---------------------------------------------------------------- lost nodes


def test_heartbeats_keep_a_node_alive():
    h = Harness()
    h.register("a")
    for _ in range(30):
        h.advance(1.0)
        h.heartbeat("a")
    assert h.c.nodes["a"].state == NodeState.ALIVE
    assert "NODE_LOST" not in h.event_types(node="a")


def test_lost_node_actors_move_past_the_local_range():
    h = Harness()
    h.register("a", cpu=2)
    h.register("b", cpu=1)
    alive(h, "x")  # -> a (more free cpu)
    assert h.c.actors["x"].node_id == "a"
    rec = h.c.actors["x"]
    local_until = rec.local_until
    assert local_until == 1 + LOCAL_RESTART_RANGE

    # b keeps heartbeating, a goes silent
    for _ in range(6):
        h.advance(1.0)
        h.heartbeat("b")
    assert h.c.nodes["a"].state == NodeState.LOST
    assert "a" in h.fenced
    assert h.event_types(node="a")[-1] == "NODE_LOST"
    node_id, start = h.last_start("x")
    assert node_id == "b"
    assert start.incarnation >= local_until  # never reuses a number node a may still use
    assert rec.state == ActorState.RESTARTING and rec.node_id == "b"
    h.started("x")
    assert rec.state == ActorState.ALIVE
    assert h.event_types("x")[-2:] == ["DIED", "RESTARTED"]
    # a LOST node's heartbeats are refused: it must register again
    with pytest.raises(StaleIncarnationError, match="lost"):
        h.heartbeat("a")


def test_lost_node_actors_wait_as_restarting_until_a_node_fits():
    h = Harness()
    h.register("a", cpu=2)
    alive(h, "x", resources={"cpu": 2})
    h.advance(6.0)
    rec = h.c.actors["x"]
    assert h.c.nodes["a"].state == NodeState.LOST
    assert rec.state == ActorState.RESTARTING and rec.node_id == ""
    h.register("small", cpu=1)
    h.advance(1.0)
    assert h.starts("x", "small") == []
    h.register("big", cpu=4)
    node_id, start = h.last_start("x")
    assert node_id == "big" and start.incarnation >= 1 + LOCAL_RESTART_RANGE
    h.started("x")
    assert rec.state == ActorState.ALIVE and rec.node_id == "big"


def test_lost_node_without_restarts_left_kills_its_actors():
    h = Harness()
    h.register("a")
    h.register("b")
    alive(h, "x", max_restarts=0)
    where = h.c.actors["x"].node_id
    other = "b" if where == "a" else "a"
    for _ in range(6):
        h.advance(1.0)
        h.heartbeat(other)
    rec = h.c.actors["x"]
    assert rec.state == ActorState.DEAD and f"node {where} lost" in rec.death_reason


def test_lost_node_that_comes_back_is_told_to_stop_fenced_copies():
    h = Harness()
    h.register("a")
    h.register("b")
    alive(h, "x")
    assert h.c.actors["x"].node_id == "a"
    old = h.running("x")
    for _ in range(6):
        h.advance(1.0)
        h.heartbeat("b")
    h.started("x")
    rec = h.c.actors["x"]
    assert rec.node_id == "b" and rec.state == ActorState.ALIVE
    # a comes back (same worker session) still running the old copy
    reply = h.register("a", running=[old])
    (stop,) = reply.stop
    assert (stop.name, stop.incarnation, stop.fenced) == ("x", old.incarnation, True)
    assert "fenced" in stop.reason
    assert rec.node_id == "b" and rec.state == ActorState.ALIVE
    assert "x" not in h.c.nodes["a"].actors
    assert h.c.nodes["a"].state == NodeState.ALIVE


def test_started_report_of_a_stale_incarnation_is_stopped():
    h = Harness(max_node_failures=0)
    h.register("a", cpu=4)
    h.register("b", cpu=2)
    node_id, inc = alive(h, "x")
    assert node_id == "a"
    # a local restart is under way when the node is excluded (first failure > 0)
    h.report("a", "x", inc, EXITED, exit_code=1, reason="x", restarting_locally=True,
             next_incarnation=inc + 1)
    rec = h.c.actors["x"]
    assert h.c.nodes["a"].state == NodeState.EXCLUDED
    assert rec.incarnation >= 1 + LOCAL_RESTART_RANGE and h.last_start("x")[0] == "b"
    n_stops = len(h.stops("x", "a"))
    # the restarted copy on a reports in: too late, it is fenced
    h.report("a", "x", inc + 1, STARTED, pid=1, address="127.0.0.1:1")
    stops = h.stops("x", "a")
    assert len(stops) == n_stops + 1
    assert stops[-1][1].incarnation == inc + 1 and stops[-1][1].fenced
    assert rec.state == ActorState.RESTARTING and rec.node_id == "b" and rec.pid == 0
    # a STARTED from a node the actor is not on
    h.report("a", "x", rec.incarnation + 5, STARTED, pid=2, address="127.0.0.1:2")
    assert h.stops("x", "a")[-1][1].incarnation == rec.incarnation + 5
    assert rec.state == ActorState.RESTARTING and rec.pid == 0
    # and one for an actor nobody created
    h.report("b", "ghost", 7, STARTED, pid=3, address="127.0.0.1:3")
    (ghost_node, ghost), = h.stops("ghost")
    assert ghost_node == "b" and ghost.fenced and ghost.incarnation == 7
    assert "ghost" not in h.c.actors
    # the real one still comes up on b
    h.started("x")
    assert rec.state == ActorState.ALIVE and rec.node_id == "b"


def test_started_report_of_a_dead_actor_is_stopped():
    h = Harness()
    h.register("a")
    node_id, inc = alive(h, "x")
    h.c.kill_actor("x")
    h.report(node_id, "x", inc + 1, STARTED, pid=1, address="127.0.0.1:1")
    assert any(s.incarnation == inc + 1 and s.fenced for _, s in h.stops("x"))
    assert h.c.actors["x"].state == ActorState.DEAD


# ---------------------------------------------------------------- exclusion


def test_node_excluded_after_max_node_failures():
    h = Harness(max_node_failures=2)
    h.register("bad", cpu=4)
    h.register("good", cpu=2)
    alive(h, "x")
    alive(h, "y")
    assert h.c.actors["x"].node_id == "bad" and h.c.actors["y"].node_id == "bad"
    rec = h.c.actors["x"]
    for _ in range(3):
        inc = rec.incarnation
        h.report("bad", "x", inc, EXITED, exit_code=1, reason="crash",
                 restarting_locally=True, next_incarnation=inc + 1)
        if h.c.nodes["bad"].state == NodeState.EXCLUDED:
            break
        h.report("bad", "x", inc + 1, STARTED, pid=5, address="127.0.0.1:5")
        h.now += 5
        h.heartbeat("bad", "good")
    bad = h.c.nodes["bad"]
    assert bad.state == NodeState.EXCLUDED and bad.failures == 3
    assert h.event_types(node="bad")[-1] == "NODE_EXCLUDED"
    assert h.launcher.calls and h.launcher.calls[0][0] == "bad"
    assert "max_node_failures=2" in h.launcher.calls[0][1]
    # both actors were stopped there (fenced) and moved to the good node, past the local range
    stopped = {s.name for n, s in h.stops() if n == "bad" and s.fenced}
    assert stopped == {"x", "y"}
    for name in ("x", "y"):
        node_id, start = h.last_start(name)
        assert node_id == "good"
        assert start.incarnation >= 1 + LOCAL_RESTART_RANGE
    assert bad.actors == set()
    # an excluded node gets no new actors, even with room
    h.create("z")
    assert h.c.actors["z"].state == ActorState.PENDING
    # it stays excluded when its worker reconnects under the same session...
    h.register("bad", cpu=4)
    assert h.c.nodes["bad"].state == NodeState.EXCLUDED
    # ...and also when its worker process restarts (a new session: systemd Restart=always
    # must not defeat max_node_failures)
    with pytest.raises(AlreadyExistsError):
        h.register("bad", cpu=4, session="restarted")
    h.disconnect("bad")
    h.register("bad", cpu=4, session="restarted")
    assert h.c.nodes["bad"].state == NodeState.EXCLUDED and h.c.nodes["bad"].failures == 3
    assert h.c.actors["z"].state == ActorState.PENDING
    # an operator re-admits it: clean count, and the waiting actor goes there
    h.c.readmit_node("bad")
    h.c.tick()
    assert h.c.nodes["bad"].state == NodeState.ALIVE and h.c.nodes["bad"].failures == 0
    assert h.last_start("z")[0] == "bad"
    assert h.event_types(node="bad")[-1] == "NODE_READMITTED"


def test_relaunch_by_the_launcher_starts_the_node_clean():
    h = Harness(max_node_failures=0)
    h.launcher.relaunches = True
    h.register("bad", cpu=4)
    _, inc = alive(h, "x")
    h.report("bad", "x", inc, EXITED, exit_code=1, reason="crash", restarting_locally=True,
             next_incarnation=inc + 1)
    assert h.c.nodes["bad"].state == NodeState.EXCLUDED and h.c.nodes["bad"].relaunch_pending
    h.register("bad", cpu=4)  # the same worker reconnecting is not the relaunch
    assert h.c.nodes["bad"].state == NodeState.EXCLUDED
    h.disconnect("bad")
    h.register("bad", cpu=4, session="replacement")
    assert h.c.nodes["bad"].state == NodeState.ALIVE and h.c.nodes["bad"].failures == 0


def test_node_failures_are_a_windowed_rate():
    h = Harness(max_node_failures=2, node_failure_window_s=100.0)
    h.register("only", cpu=16)
    node = h.c.nodes["only"]
    for i in range(5):  # 5 failures, each 60 s apart: never more than 2 in a window of 100 s
        node.failure_times = [t - 60 for t in node.failure_times]
        _, inc = alive(h, f"x{i}")
        h.report("only", f"x{i}", inc, EXITED, exit_code=1, reason="crash",
                 restarting_locally=True, next_incarnation=inc + 1)
        assert node.state == NodeState.ALIVE, i
    assert node.failures == 2
    # one more in the window makes three: excluded
    _, inc = alive(h, "y")
    h.report("only", "y", inc, EXITED, exit_code=1, reason="crash", restarting_locally=True,
             next_incarnation=inc + 1)
    assert node.state == NodeState.EXCLUDED


def test_exclusion_survives_a_lost_node_coming_back():
    h = Harness(max_node_failures=0)
    h.register("bad", cpu=4)
    h.register("good", cpu=2)
    node_id, inc = alive(h, "x")
    assert node_id == "bad"
    h.report("bad", "x", inc, EXITED, exit_code=1, reason="crash", restarting_locally=True,
             next_incarnation=inc + 1)
    assert h.c.nodes["bad"].state == NodeState.EXCLUDED
    for _ in range(6):
        h.advance(1.0)
        h.heartbeat("good")
    assert h.c.nodes["bad"].state == NodeState.LOST
    h.register("bad", cpu=4)  # the same worker session reconnects
    assert h.c.nodes["bad"].state == NodeState.EXCLUDED
    h.create("y")
    assert h.last_start("y")[0] == "good"
    h.disconnect("bad")
    h.register("bad", cpu=4, session="restarted")  # a restarted worker: still excluded
    assert h.c.nodes["bad"].state == NodeState.EXCLUDED


def test_never_exclude_with_minus_one():
    h = Harness(max_node_failures=-1)
    h.register("a")
    node_id, inc = alive(h, "x")
    for i in range(20):
        h.report(node_id, "x", inc + i, EXITED, exit_code=1, reason="crash",
                 restarting_locally=True, next_incarnation=inc + i + 1)
    assert h.c.nodes["a"].state == NodeState.ALIVE and h.c.nodes["a"].failures == 20
    assert h.launcher.calls == []


# ---------------------------------------------------------------- registration


def test_duplicate_node_id_with_a_live_session_is_refused():
    h = Harness()
    h.register("a")
    alive(h, "x")
    epoch = h.epochs["a"]
    with pytest.raises(AlreadyExistsError, match="--node-id"):
        h.register("a", session="impostor")
    # nothing changed
    node = h.c.nodes["a"]
    assert node.epoch == epoch and node.session_id == "session-a" and node.connected
    assert h.c.actors["x"].state == ActorState.ALIVE
    h.heartbeat("a")  # the first worker's epoch still works
    assert "a" not in h.fenced


def test_node_id_can_be_reused_once_the_old_one_is_lost_or_gone():
    h = Harness()
    h.register("a")
    h.advance(6.0)
    assert h.c.nodes["a"].state == NodeState.LOST
    h.register("a", session="new")
    assert h.c.nodes["a"].state == NodeState.ALIVE
    h.disconnect("a")  # its stream broke; the id may be taken over by a restarted worker
    h.register("a", session="newer")
    assert h.c.nodes["a"].session_id == "newer"


def test_reconnect_gets_a_new_epoch_and_fences_the_old_one():
    h = Harness()
    h.register("a")
    old_epoch = h.epochs["a"]
    h.register("a")  # same session: a reconnect
    assert h.epochs["a"] > old_epoch
    assert "a" in h.fenced  # the old stream is closed
    with pytest.raises(StaleIncarnationError):
        h.c.heartbeat("a", old_epoch)
    with pytest.raises(NotFoundError):
        h.c.heartbeat("nobody", 1)


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("node_id", "", InvalidArgumentError),
        ("node_id", "has space", InvalidArgumentError),
        ("session_id", "", InvalidArgumentError),
        ("session_id", "s" * 200, InvalidArgumentError),
        ("address", "", InvalidArgumentError),
    ],
)
def test_register_validation(field, value, error):
    h = Harness()
    req = pb.RegisterNodeRequest(node_id="n", session_id="s", address="127.0.0.1",
                                 resources={"cpu": 1})
    setattr(req, field, value)
    with pytest.raises(error):
        h.c.register_node(req)
    assert h.c.nodes == {}


def test_register_rejects_bad_resources():
    h = Harness()
    req = pb.RegisterNodeRequest(node_id="n", session_id="s", address="127.0.0.1",
                                 resources={"cpu": -1})
    with pytest.raises(InvalidArgumentError):
        h.c.register_node(req)


# ---------------------------------------------------------------- reconciliation


def test_reconnect_with_everything_running_changes_nothing():
    h = Harness()
    h.register("a")
    alive(h, "x")
    rec = h.c.actors["x"]
    before = (rec.incarnation, rec.pid, rec.state, rec.restarts)
    h.disconnect("a")
    reply = h.register("a", running=[h.running("x")])
    assert list(reply.stop) == []
    assert (rec.incarnation, rec.pid, rec.state, rec.restarts) == before
    assert h.c.nodes["a"].actors == {"x"}
    assert h.c.nodes["a"].available()["cpu"] == 1.0


def test_missing_actor_is_restarted_on_reconnect():
    h = Harness()
    h.register("a")
    node_id, inc = alive(h, "x")
    h.disconnect("a")
    h.register("a", running=[])  # it died while the link was down
    rec = h.c.actors["x"]
    assert rec.restarts == 1 and rec.incarnation == inc + 1
    assert h.c.nodes["a"].failures == 0  # not counted against the node
    node_id, start = h.last_start("x")
    assert node_id == "a" and start.incarnation == inc + 1
    assert "after the node reconnected" in [e.message for e in h.c.events.recent()
                                              if e.type == pb.EVENT_DIED][-1]


def test_local_restart_during_a_disconnect_is_adopted():
    h = Harness()
    h.register("a")
    _, inc = alive(h, "x")
    ra = h.running("x")
    ra.incarnation, ra.restarts, ra.pid, ra.address = inc + 2, 2, 777, "127.0.0.1:777"
    h.disconnect("a")
    reply = h.register("a", running=[ra])
    rec = h.c.actors["x"]
    assert list(reply.stop) == []
    assert (rec.incarnation, rec.restarts, rec.pid, rec.state) == (inc + 2, 2, 777, ActorState.ALIVE)


def test_new_coordinator_adopts_unknown_actors():
    old = Harness()
    old.register("a")
    alive(old, "x", max_restarts=4, kwargs={"start": 3})
    ra = old.running("x")
    new = Harness()  # the coordinator restarted with no state
    reply = new.register("a", running=[ra])
    assert list(reply.stop) == []
    rec = new.c.actors["x"]
    assert rec.state == ActorState.ALIVE
    assert (rec.incarnation, rec.pid, rec.address, rec.node_id) == (ra.incarnation, ra.pid, ra.address, "a")
    assert rec.spec.max_restarts == 4 and codec.decode(rec.spec.kwargs) == {"start": 3}
    assert rec.local_until == ra.local_until
    assert new.c.nodes["a"].actors == {"x"}
    assert new.c.nodes["a"].available()["cpu"] == 1.0
    assert new.event_types("x") == ["ALIVE"]
    # and it then restarts it in place like any other
    new.now += 5
    new.heartbeat("a")
    new.report("a", "x", ra.incarnation, EXITED, exit_code=-9, reason="killed",
               restarting_locally=True, next_incarnation=ra.incarnation + 1)
    assert rec.state == ActorState.RESTARTING and rec.restarts == ra.restarts + 1


def test_unknown_actors_are_stopped_when_adoption_is_off():
    old = Harness()
    old.register("a")
    alive(old, "x")
    new = Harness(adopt_unknown_actors=False)
    reply = new.register("a", running=[old.running("x")])
    (stop,) = reply.stop
    assert stop.name == "x" and stop.fenced and "unknown" in stop.reason
    assert "x" not in new.c.actors


def test_dead_actor_reported_on_reconnect_is_stopped():
    h = Harness()
    h.register("a")
    alive(h, "x")
    ra = h.running("x")
    h.disconnect("a")
    h.c.kill_actor("x")
    reply = h.register("a", running=[ra])
    (stop,) = reply.stop
    assert stop.name == "x" and "DEAD" in stop.reason


def test_reported_actor_with_a_bad_name_is_ignored():
    h = Harness()
    ra = pb.RunningActor(spec=pb.ActorSpec(name="bad name!", class_path="a:B"), incarnation=1)
    reply = h.register("a", running=[ra])
    assert list(reply.stop) == [] and h.c.actors == {}


def test_too_many_running_actors_reported():
    h = Harness()
    running = [pb.RunningActor(spec=pb.ActorSpec(name=f"x{i}"), incarnation=1) for i in range(10_001)]
    with pytest.raises(ResourceExhaustedError):
        h.register("a", running=running)


# ---------------------------------------------------------------- fencing callers


def test_check_caller_fences_replaced_incarnations():
    h = Harness()
    h.register("a")
    node_id, inc = alive(h, "x")
    h.c.check_caller("client")
    h.c.check_caller(f"x@{inc}")
    h.c.check_caller("nobody@3")
    h.c.check_caller("x@notanumber")
    h.report(node_id, "x", inc, EXITED, exit_code=1, reason="gone")
    with pytest.raises(PermissionDeniedError, match="fenced"):
        h.c.check_caller(f"x@{inc}")
    h.c.check_caller(f"x@{inc + 1}")
    h.c.kill_actor("x")
    with pytest.raises(PermissionDeniedError):
        h.c.check_caller(f"x@{inc + 1}")


# ---------------------------------------------------------------- create_actor validation


def _spec(**fields) -> pb.ActorSpec:
    base = dict(name="x", class_path="tests.actors:Counter")
    base.update(fields)
    return pb.ActorSpec(**base)


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        ({"name": ""}, InvalidArgumentError, "actor name must not be empty"),
        ({"name": "a b"}, InvalidArgumentError, "characters outside"),
        ({"name": "x" * 201}, InvalidArgumentError, "limit is 200"),
        ({"class_path": "no_colon"}, InvalidArgumentError, "package.module:Class"),
        ({"class_path": "pkg.mod:"}, InvalidArgumentError, "package.module:Class"),
        ({"class_path": "1pkg:Cls"}, InvalidArgumentError, "package.module:Class"),
        ({"class_path": "pkg;rm -rf:X"}, InvalidArgumentError, "package.module:Class"),
        ({"class_path": "a" * 195 + ".b:Class"}, InvalidArgumentError, "limit is 200"),
        ({"kwargs": codec.encode([1, 2])}, InvalidArgumentError, "msgpack map"),
        ({"kwargs": codec.encode({1: 2})}, InvalidArgumentError, "string keys"),
        ({"kwargs": b"\xc1"}, InvalidArgumentError, "malformed"),
        ({"kwargs": codec.encode({"a": 1}) + b"\x00"}, InvalidArgumentError, "trailing"),
        ({"kwargs": b"\x00" * (MAX_KWARGS_BYTES + 1)}, ResourceExhaustedError, "kwargs"),
        ({"env": codec.encode({"A": 1})}, InvalidArgumentError, "env"),
        ({"max_restarts": -2}, InvalidArgumentError, "max_restarts"),
        ({"max_concurrency": 5000}, InvalidArgumentError, "max_concurrency"),
        ({"resources": {"cpu": -1.0}}, InvalidArgumentError, "cpu"),
        ({"resources": {"cpu": float("nan")}}, InvalidArgumentError, "finite"),
        ({"resources": {"gpu": float("inf")}}, InvalidArgumentError, "finite"),
        ({"resources": {"bad key": 1.0}}, InvalidArgumentError, "characters outside"),
        ({"resources": {f"r{i}": 1.0 for i in range(33)}}, InvalidArgumentError, "limit is 32"),
    ],
)
def test_create_actor_validation(fields, error, match):
    h = Harness()
    h.register("a")
    with pytest.raises(error, match=match):
        h.c.create_actor(_spec(**fields))
    assert h.c.actors == {} and h.sent == []
    assert h.c.events.seq == 1  # only NODE_JOINED


def test_create_actor_duplicate_name_and_get_if_exists():
    h = Harness()
    h.register("a")
    first = h.c.create_actor(_spec(kwargs=codec.encode({"start": 1})))
    with pytest.raises(AlreadyExistsError, match="'x'"):
        h.c.create_actor(_spec())
    same = h.c.create_actor(_spec(class_path="other.mod:Other"), get_if_exists=True)
    assert same is first and same.spec.class_path == "tests.actors:Counter"
    assert len(h.starts("x")) == 1


def test_create_actor_defaults():
    h = Harness()
    h.register("a")
    rec = h.c.create_actor(_spec())
    assert dict(rec.spec.resources) == {"cpu": 1.0}
    assert rec.spec.max_concurrency == 1
    assert rec.incarnation == 1 and rec.restarts == 0


def test_actor_limit():
    h = Harness(max_actors=3)
    h.register("a", cpu=100)
    for i in range(3):
        h.c.create_actor(_spec(name=f"x{i}"))
    with pytest.raises(ResourceExhaustedError, match="limit"):
        h.c.create_actor(_spec(name="x3"))
    h.c.kill_actor("x0")
    h.c.create_actor(_spec(name="x3"))  # dead records make room
    assert h.c.actors["x3"].state == ActorState.STARTING


def test_cluster_info():
    h = Harness(max_node_failures=7)
    h.register("a")
    h.now += 12
    info = h.c.cluster_info()
    assert info.uptime_s == pytest.approx(12)
    assert info.max_node_failures == 7 and info.heartbeat_timeout_s == 5.0
    assert info.event_seq == h.c.events.seq


# ---------------------------------------------------------------- review fixes


def test_new_coordinator_keeps_the_newer_of_two_reported_copies():
    """Without durable state the first report wins, unless a later node reports a newer
    incarnation (the first copy is a partition's leftover): then the older is fenced."""
    old = Harness()
    old.register("a")
    alive(old, "x")
    stale = old.running("x")
    newer = pb.RunningActor()
    newer.CopyFrom(stale)
    newer.incarnation = stale.incarnation + LOCAL_RESTART_RANGE
    newer.address, newer.pid = "127.0.0.1:20001", 777
    new = Harness()
    new.register("a", running=[stale])
    assert new.c.actors["x"].incarnation == stale.incarnation
    reply = new.register("b", running=[newer])
    assert list(reply.stop) == []  # b's copy is kept
    rec = new.c.actors["x"]
    assert (rec.node_id, rec.incarnation, rec.pid) == ("b", newer.incarnation, 777)
    assert [s.incarnation for _, s in new.stops("x", "a")] == [stale.incarnation]
    assert new.stops("x", "a")[0][1].fenced
    assert new.c.nodes["a"].actors == set() and new.c.nodes["b"].actors == {"x"}


def test_a_stop_that_cannot_be_sent_waits_for_the_node_to_connect():
    h = Harness()
    h.register("a")
    alive(h, "x")
    h.disconnect("a")  # between a re-registration and its stream, say
    h.c.kill_actor("x", "by test")
    assert h.stops("x") == []
    h.connect("a")
    assert [(n, s.incarnation, s.reason) for n, s in h.stops("x")] == [("a", 1, "by test")]


def test_unplaceable_actors_cost_one_scan_per_shape(monkeypatch):
    h = Harness()
    h.register("a", cpu=1)
    for i in range(300):
        h.create(f"big-{i}", resources={"cpu": 8})
    calls = 0
    choose = placement.choose_node

    def counting(nodes, need, *role):
        nonlocal calls
        calls += 1
        return choose(nodes, need, *role)

    monkeypatch.setattr(placement, "choose_node", counting)
    h.c.placement.capacity_changed()
    h.advance(0.1)  # one pump: 300 waiting actors of one shape
    assert calls == 1
    h.advance(0.1)  # nothing changed: no pump at all
    assert calls == 1
    h.register("b", cpu=8)  # room for one
    assert calls >= 2 and sum(1 for _, s in h.starts() if s.spec.name.startswith("big-")) == 1


def test_empty_lost_nodes_are_forgotten_after_the_retention():
    h = Harness(lost_node_retention_s=60.0)
    h.register("a")
    h.advance(6.0)  # no heartbeat: lost
    assert h.c.nodes["a"].state == NodeState.LOST
    h.advance(30.0)
    assert "a" in h.c.nodes
    h.advance(31.0)
    assert "a" not in h.c.nodes
