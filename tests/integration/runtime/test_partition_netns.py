"""A real network partition: a worker in its own network namespace loses its link.

Topology (both veth pairs are this test's own; nothing else receives traffic):

    host                                   namespace "island"
    coordinator  A.host_ip  ---- link A ----  A.ns_ip   (control: worker <-> coordinator)
    worker "main" actors on B.host_ip --- link B ---  B.ns_ip  worker "island" + its actors

Link A carries the island worker's coordinator traffic; link B carries actor
traffic both ways. Cutting link A is a partition of the island from the
coordinator while its actors can still reach (and be reached by) the actors on
the host: exactly when fencing matters. The island's actors must be declared
lost and rescheduled, and their old incarnations, still running, must be
refused when they call another actor. When link A heals the island worker
registers again and is told to stop the old copies.

Handles made before the cut are fenced on the caller side: a handle trusts its
incarnation only while the coordinator said it is current (`valid_for_s`), so
after the move a default handle goes to the new incarnation and a strict one
raises StaleIncarnationError, even though the old copy still answers.
"""

from __future__ import annotations

import contextlib
import os

import grpc
import psutil
import pytest

import ftrl
from ftrl.coordinator.controller import LOCAL_RESTART_RANGE
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.security import write_token_file
from tests import procs
from tests.cluster import event_seq, pid_gone, wait_event, wait_until
from tests.netns import Netns, netns_unavailable

pytestmark = pytest.mark.netns

RELAY = "tests.security_actors:Relay"
TARGET = "tests.security_actors:FuzzTarget"
HB = ["--heartbeat-interval", "0.5", "--heartbeat-timeout", "2"]


@pytest.fixture(scope="module")
def netns_ok():
    reason = netns_unavailable()
    if reason:
        pytest.skip(f"partition tests need network namespaces: {reason}")


def _node(client, node_id: str) -> dict:
    return next(n for n in client.nodes() if n["node_id"] == node_id)


def _raw_call(address: str, token: str, method: str, incarnation: int, *args):
    """One CallUnary straight to `address` (no coordinator lookup, no retries)."""
    parts, total = codec.encode_parts([list(args), {}])
    header = pb.CallHeader(method=method, incarnation=incarnation, total_bytes=total)
    with grpc.insecure_channel(address) as channel:
        reply = pb_grpc.ActorStub(channel).CallUnary(
            pb.CallChunk(header=header, data=b"".join(bytes(p) for p in parts)),
            metadata=(("authorization", f"Bearer {token}"),), timeout=15)
    assert not reply.HasField("error"), reply.error
    return codec.decode_parts(reply.data)


def _actor_titles(name: str) -> list[int]:
    """Pids of processes titled `ftrl-actor NAME` (one per running copy of the actor)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if " ".join(p.info["cmdline"] or ()).strip() == f"ftrl-actor {name}":
                out.append(p.pid)
    return out


def test_partitioned_node_is_lost_fenced_and_stopped_on_heal(netns_ok, tmp_path):
    token_file = tmp_path / "token"
    token = write_token_file(token_file)
    common = ["--token-file", str(token_file)]
    tag = f"part{os.getpid()}"
    relay_name, counter_name, peer_name = f"{tag}/relay", f"{tag}/counter", f"{tag}/peer"
    started = []
    ns = Netns()
    try:
        link_a, link_b = ns.add_link(), ns.add_link()
        port_file = tmp_path / "coordinator.port"
        coord_log = tmp_path / "coordinator.log"
        coordinator = procs.start(procs.ftrl(
            "coordinator", "--host", link_a.host_ip, "--port", "0", "--port-file", str(port_file),
            *HB, *common), coord_log)
        started.append(coordinator)
        port = procs.wait_port(port_file, coordinator, coord_log)
        address = f"{link_a.host_ip}:{port}"

        def worker(node_id: str, bind: str, slots: int, in_ns: bool):
            argv = procs.ftrl("worker", "--coordinator", address, "--node-id", node_id,
                              "--slots", str(slots), "--address", bind, "--actor-hang-timeout", "5",
                              "--log-dir", str(tmp_path / node_id), *common)
            proc = procs.start(ns.exec_argv(*argv) if in_ns else argv, tmp_path / f"{node_id}.log")
            started.append(proc)
            return proc

        c = ftrl.Client(address, token=token, timeout=10)
        island = worker("island", link_b.ns_ip, 2, in_ns=True)
        wait_until(lambda: _node(c, "island")["connected"], 30, what="the island worker to join")
        relay = c.create_actor(RELAY, name=relay_name)
        c.create_actor(TARGET, name=counter_name)
        worker("main", link_b.host_ip, 4, in_ns=False)
        wait_until(lambda: _node(c, "main")["connected"], 30, what="the host worker to join")
        peer = c.create_actor(TARGET, name=peer_name)

        old = {n: c.actor(n) for n in (relay_name, counter_name)}
        assert {a["node_id"] for a in old.values()} == {"island"}
        assert c.actor(peer_name)["node_id"] == "main"
        assert old[relay_name]["address"].startswith(link_b.ns_ip + ":")
        # before the cut the island's relay calls the host's actor as itself
        assert relay.call("connect", peer_name) == c.actor(peer_name)["address"]
        assert relay.call("call_peer", "add", 1, 2) == {"ok": True, "result": 3}
        assert peer.call("count") == 1
        follow = c.get_actor(counter_name)  # handles made before the cut
        strict = c.get_actor(counter_name, strict=True)
        assert follow.call("pid") == strict.call("pid") == old[counter_name]["pid"]

        seq = event_seq(c)
        link_a.down()  # ---------------------------------------------------- partition
        lost = wait_event(c, seq, lambda e: e["type"] == "NODE_LOST" and e["node_id"] == "island",
                          nodes=True, timeout=30)
        assert "no heartbeat" in lost["message"]
        new = {}
        for name, rec in old.items():
            moved = c.wait_actor(name, 30, min_incarnation=rec["incarnation"] + 1)
            assert moved["state"] == "ALIVE" and moved["node_id"] == "main"
            assert moved["incarnation"] >= rec["incarnation"] + LOCAL_RESTART_RANGE
            assert moved["pid"] != rec["pid"]
            new[name] = moved

        # the old copies still run on the island, unaware, and still answer
        for name, rec in old.items():
            assert not pid_gone(rec["pid"]), f"old {name} should still run while partitioned"
        assert _raw_call(old[counter_name]["address"], token, "echo", old[counter_name]["incarnation"],
                         "still here") == "still here"
        # ... but the old relay is fenced: the host's actor refuses its calls
        outcome = _raw_call(old[relay_name]["address"], token, "call_peer",
                            old[relay_name]["incarnation"], "add", 1, 2)
        assert outcome["ok"] is False, outcome
        assert outcome["error"] == "PermissionDeniedError", outcome
        assert f"{relay_name}@{old[relay_name]['incarnation']} is fenced" in outcome["message"]
        assert peer.call("count") == 1  # the refused call never ran
        # handles from before the cut do not reach the old copy once it is fenced
        assert follow.call("pid") == new[counter_name]["pid"]
        assert follow.incarnation == new[counter_name]["incarnation"]
        with pytest.raises(ftrl.StaleIncarnationError, match="was replaced"):
            strict.call("pid")
        assert strict.wait_alive(10) == new[counter_name]["incarnation"]
        assert strict.call("pid") == new[counter_name]["pid"]
        # the new relay (on the host) may call
        relay = c.get_actor(relay_name)
        assert relay.incarnation == new[relay_name]["incarnation"]
        assert relay.call("connect", peer_name)
        assert relay.call("call_peer", "add", 2, 2) == {"ok": True, "result": 4}

        seq = event_seq(c)
        link_a.up()  # -------------------------------------------------------- heal
        wait_event(c, seq, lambda e: e["type"] == "NODE_JOINED" and e["node_id"] == "island",
                   nodes=True, timeout=30)
        wait_until(lambda: _node(c, "island")["state"] == "ALIVE" and _node(c, "island")["connected"],
                   30, what="the island to be back")
        for name, rec in old.items():
            wait_until(lambda rec=rec: pid_gone(rec["pid"]), 30, what=f"the fenced copy of {name} to stop")
        for name, rec in new.items():
            now = c.actor(name)
            assert (now["state"], now["node_id"], now["incarnation"], now["pid"]) == (
                "ALIVE", "main", rec["incarnation"], rec["pid"])
            assert _actor_titles(name) == [rec["pid"]]  # exactly one copy runs
        assert _node(c, "island")["actors"] == []
        assert relay.call("call_peer", "add", 3, 3) == {"ok": True, "result": 6}
        assert island.poll() is None  # the island worker itself kept running
        log = (tmp_path / "island.log").read_text()
        assert f"coordinator fenced {relay_name} incarnation {old[relay_name]['incarnation']}" in log
        c.close()
    finally:
        procs.stop(*reversed(started))
        ns.close()
