"""Actors on a real cluster: calls, errors, restarts in place, hangs, restart limits."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

import ftrl
from tests.cluster import cmdline, event_seq, pid_gone, wait_event, wait_until


def test_calls_state_and_records(client, shared_cluster, actors):
    h = actors("basic", kwargs={"start": 5}, max_restarts=2)
    assert h.call("incr", 2) == 7
    assert h.call("incr", k=3) == 10
    assert h.call("aincr") == 11  # async methods run on the actor's loop
    futures = [h.submit("incr") for _ in range(10)]
    assert sorted(f.result(30) for f in futures) == list(range(12, 22))
    assert h.call("get") == 21
    me = h.call("whoami")
    rec = client.actor("basic")
    assert rec["state"] == "ALIVE" and rec["incarnation"] == 1 and rec["restarts"] == 0
    assert rec["pid"] == me["pid"] and rec["node_id"] == me["node_id"]
    assert me["name"] == "basic" and me["incarnation"] == 1
    assert rec["class_path"] == "tests.actors:Counter" and rec["max_restarts"] == 2
    assert rec["resources"] == {"cpu": 1.0}
    listed = {a["name"]: a for a in client.actors()}
    assert listed["basic"]["pid"] == me["pid"]
    nodes = {n["node_id"]: n for n in client.nodes()}
    assert set(nodes) == set(shared_cluster.worker_procs)
    assert "basic" in nodes[me["node_id"]]["actors"]
    assert all(n["state"] == "ALIVE" and n["slots"] == 4 for n in nodes.values())
    assert h.state() == {"n": 21}
    h.restore({"n": 100})
    assert h.call("get") == 100


def test_numpy_payloads(actors):
    h = actors("arrays")
    arr = np.arange(768 * 1024, dtype=np.float32).reshape(768, -1)  # 3 MiB: several chunks
    back = h.call("echo", arr)
    assert back.dtype == np.float32 and back.shape == arr.shape
    np.testing.assert_array_equal(back, arr)
    assert h.call("total", np.ones((2, 3), np.int64)) == 6.0
    assert h.call("echo", {0: "a", "k": [1, None]}) == {0: "a", "k": [1, None]}


def test_process_title(client, actors):
    h = actors("titled/actor-0")
    pid = client.actor("titled/actor-0")["pid"]
    assert "ftrl-actor titled/actor-0" in cmdline(pid)
    assert h.call("pid") == pid


def test_user_exception_comes_back_and_the_actor_keeps_serving(client, actors):
    h = actors("raiser")
    pid = h.call("pid")
    with pytest.raises(ftrl.ActorError) as info:
        h.call("fail", "the message")
    err = info.value
    assert err.remote_type == "ValueError" and err.remote_message == "the message"
    assert "tests/actors.py" in err.remote_traceback and "in fail" in err.remote_traceback
    assert "ValueError: the message" in err.remote_traceback
    # a result that cannot be encoded is reported the same way
    with pytest.raises(ftrl.ActorError, match="msgpack-able"):
        h.call("unencodable")
    assert h.call("incr") == 1
    rec = client.actor("raiser")
    assert rec["pid"] == pid and rec["incarnation"] == 1 and rec["restarts"] == 0


def test_sigkill_restarts_in_place(client, actors):
    h = actors("victim", kwargs={"start": 40}, max_restarts=-1)
    before = client.actor("victim")
    seq = event_seq(client)
    os.kill(before["pid"], signal.SIGKILL)
    restarted = wait_event(client, seq, lambda e: e["type"] == "RESTARTED", prefix="victim")
    assert restarted["incarnation"] == before["incarnation"] + 1
    after = client.wait_actor("victim", 30, min_incarnation=before["incarnation"] + 1)
    assert after["state"] == "ALIVE"
    assert after["node_id"] == before["node_id"]  # in place
    assert after["pid"] != before["pid"] and after["restarts"] == 1
    assert pid_gone(before["pid"])
    assert "ftrl-actor victim" in cmdline(after["pid"])
    # the handle follows the new incarnation; state starts fresh from the constructor
    assert h.call("incr") == 41
    assert h.incarnation == after["incarnation"]
    me = h.call("whoami")
    assert me["incarnation"] == after["incarnation"] and me["restarts"] == 1
    died = wait_event(client, seq, lambda e: e["type"] == "DIED", prefix="victim")
    assert "SIGKILL" in died["message"] and died["incarnation"] == before["incarnation"]


def test_crash_during_a_call(client, actors):
    h = actors("crasher", max_restarts=-1)
    first = client.actor("crasher")
    with pytest.raises(ftrl.ActorUnavailableError):
        h.call("crash", 13)
    after = client.wait_actor("crasher", 30, min_incarnation=first["incarnation"] + 1)
    assert after["state"] == "ALIVE" and after["node_id"] == first["node_id"]
    assert h.call("incr") == 1


def test_wait_alive_after_a_failed_call_adopts_the_replacement(client, actors):
    """The coordinator may not have heard of the death when the caller asks: the handle
    must not adopt the incarnation it just saw fail."""
    actors("phoenix", max_restarts=-1)
    h = client.get_actor("phoenix", strict=True)  # strict: no transparent retry
    first = client.actor("phoenix")
    os.kill(first["pid"], signal.SIGKILL)
    with pytest.raises(ftrl.ActorUnavailableError):
        h.call("incr")
    assert h.wait_alive(30) == first["incarnation"] + 1
    assert h.call("pid") != first["pid"]


def test_sigstop_is_a_hang_and_is_restarted(client, actors):
    h = actors("frozen", max_restarts=-1)
    before = client.actor("frozen")
    seq = event_seq(client)
    os.kill(before["pid"], signal.SIGSTOP)
    try:
        hung = wait_event(client, seq, lambda e: e["type"] == "DIED" and "hung" in e["message"],
                          prefix="frozen", timeout=30)
        assert hung["incarnation"] == before["incarnation"]
        after = client.wait_actor("frozen", 30, min_incarnation=before["incarnation"] + 1)
    finally:
        if not pid_gone(before["pid"]):
            os.kill(before["pid"], signal.SIGCONT)
    assert after["state"] == "ALIVE" and after["node_id"] == before["node_id"]
    assert after["pid"] != before["pid"]
    wait_until(lambda: pid_gone(before["pid"]), 10, what="the stopped process to be killed")
    assert h.call("incr") == 1


def test_wedged_event_loop_is_a_hang(client, actors):
    h = actors("wedged", max_restarts=-1)
    before = client.actor("wedged")
    with pytest.raises(ftrl.ActorUnavailableError):
        h.call("block_loop", 60)
    after = client.wait_actor("wedged", 30, min_incarnation=before["incarnation"] + 1)
    assert after["pid"] != before["pid"] and after["node_id"] == before["node_id"]
    assert h.call("incr") == 1


def test_long_sync_call_is_not_a_hang(client, shared_cluster, actors):
    h = actors("sleeper")
    before = client.actor("sleeper")
    hang_timeout = shared_cluster.actor_hang_timeout
    t0 = time.monotonic()
    assert h.call("sleep", 2 * hang_timeout) == 2 * hang_timeout
    assert time.monotonic() - t0 >= 2 * hang_timeout
    after = client.actor("sleeper")
    assert (after["pid"], after["incarnation"], after["state"]) == (before["pid"], 1, "ALIVE")


def test_max_restarts_exceeded_is_dead(client, actors):
    h = actors("fragile", max_restarts=1)
    first = client.actor("fragile")
    seq = event_seq(client)
    os.kill(first["pid"], signal.SIGKILL)
    second = client.wait_actor("fragile", 30, min_incarnation=2)
    assert second["state"] == "ALIVE" and second["restarts"] == 1
    assert h.call("incr") == 1
    os.kill(second["pid"], signal.SIGKILL)
    dead = wait_event(client, seq, lambda e: e["type"] == "DEAD", prefix="fragile")
    assert "no restarts left (max_restarts=1)" in dead["message"]
    rec = client.actor("fragile")
    assert rec["state"] == "DEAD" and rec["pid"] == 0 and rec["restarts"] == 1
    assert "killed by signal SIGKILL" in rec["death_reason"]
    assert "no restarts left (max_restarts=1)" in rec["death_reason"]
    with pytest.raises(ftrl.ActorDiedError, match="DEAD"):
        h.call("incr")
    with pytest.raises(ftrl.ActorDiedError):
        client.get_actor("fragile").call("incr")
    node = next(n for n in client.nodes() if n["node_id"] == first["node_id"])
    assert "fragile" not in node["actors"]
    # the name is free again
    h2 = client.create_actor("tests.actors:Counter", name="fragile", kwargs={"start": 9})
    assert h2.call("get") == 9 and h2.incarnation > second["incarnation"]


def test_kill_actor(client, actors):
    h = actors("doomed", max_restarts=-1)
    pid = client.actor("doomed")["pid"]
    rec = client.kill_actor("doomed", "no longer needed")
    assert rec["state"] == "DEAD" and "no longer needed" in rec["death_reason"]
    wait_until(lambda: pid_gone(pid), 15, what="the killed actor's process to exit")
    with pytest.raises(ftrl.ActorDiedError):
        h.call("incr")
    with pytest.raises(ftrl.NotFoundError):
        client.kill_actor("never-existed")


def test_pending_until_resources_free_up(client, actors):
    actors("hog1", resources={"cpu": 4})
    actors("hog2", resources={"cpu": 4})
    assert {client.actor(n)["node_id"] for n in ("hog1", "hog2")} == {"local-0", "local-1"}
    waiter = actors("waiter", wait=False)
    assert client.actor("waiter")["state"] == "PENDING"
    with pytest.raises(ftrl.FtrlTimeoutError, match="PENDING"):
        actors("needs-gpu", resources={"gpu": 1}, timeout=1.0)
    freed = client.actor("hog1")["node_id"]
    client.kill_actor("hog1")
    rec = client.wait_actor("waiter", 30)
    assert rec["state"] == "ALIVE" and rec["node_id"] == freed
    assert waiter.call("incr") == 1
    assert client.actor("needs-gpu")["state"] == "PENDING"


def test_events_replay_from_seq_zero(client, actors):
    actors("replayed")
    seen = []
    for event in client.events(prefix="replayed", after_seq=0, timeout=1.0):
        seen.append(event["type"])
        if event["type"] == "ALIVE":
            break
    assert seen[:2] == ["CREATED", "ALIVE"]  # retained events, replayed from the start
