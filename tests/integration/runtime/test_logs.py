"""`ftrl logs`: actor log files read through the worker that holds them, on another node,
followed live, after a SIGKILL, and for a whole job; events as structured log lines."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

from tests.cluster import wait_until
from tests.procs import env, ftrl

COUNTER = "tests.actors:Counter"


def _logs(cluster, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([*ftrl("logs", *args, "--coordinator", cluster.address,
                                 "--token-file", str(cluster.token_file))],
                          capture_output=True, text=True, timeout=timeout, env=env())


@contextlib.contextmanager
def _follow(cluster, target: str) -> Iterator[list[str]]:
    """`ftrl logs TARGET -f -n 0` running: yields the lines it printed so far (a live list);
    ends it with Ctrl-C, which must exit cleanly (no traceback, no error logged)."""
    follower = subprocess.Popen(
        [*ftrl("logs", target, "-f", "-n", "0", "--coordinator", cluster.address,
               "--token-file", str(cluster.token_file))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(follower.stdout), daemon=True)
    reader.start()
    try:
        time.sleep(1.0)  # the follower has connected and read to the end
        yield seen
    finally:
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=20)
    assert follower.returncode in (0, 130) and not err.strip(), err


def test_logs_of_an_actor_on_another_node_follow_restart_and_job(make_cluster):
    cluster = make_cluster(workers=1, slots=2)
    cluster.start_worker("far", extra=["--resources", "far=2"])
    cluster.wait_nodes(["far"])
    client = cluster.client()
    printer = client.create_actor(COUNTER, name="lj/printer", resources={"far": 1}, max_restarts=3)
    other = client.create_actor(COUNTER, name="lj/other")
    assert client.actor("lj/printer")["node_id"] == "far"
    assert client.actor("lj/other")["node_id"] != "far"
    printer.call("say", "MARKER-ONE")
    other.call("say", "OTHER-LINE")

    proc = _logs(cluster, "lj/printer")
    assert proc.returncode == 0, proc.stderr
    assert "MARKER-ONE" in proc.stdout
    assert "---- actor=lj/printer incarnation=" in proc.stdout  # each incarnation starts its lines
    assert "OTHER-LINE" not in proc.stdout

    # -f: a line printed after it started shows up; Ctrl-C ends it cleanly
    with _follow(cluster, "lj/printer") as seen:
        printer.call("say", "MARKER-LIVE")
        wait_until(lambda: any("MARKER-LIVE" in line for line in seen), timeout=20)
    assert not any("MARKER-ONE" in line for line in seen)  # -n 0: only new lines

    # SIGKILL: the log keeps the dead incarnation's lines and the new one's start line
    before = client.actor("lj/printer")
    os.kill(before["pid"], signal.SIGKILL)
    wait_until(lambda: client.actor("lj/printer")["incarnation"] > before["incarnation"]
               and client.actor("lj/printer")["state"] == "ALIVE", timeout=30)
    after = client.actor("lj/printer")
    proc = _logs(cluster, "lj/printer", "-n", "-1")
    assert "MARKER-ONE" in proc.stdout and "MARKER-LIVE" in proc.stdout
    assert f"---- actor=lj/printer incarnation={before['incarnation']} " in proc.stdout
    assert f"---- actor=lj/printer incarnation={after['incarnation']} " in proc.stdout

    # a job: every actor named lj/..., each line says whose it is
    proc = _logs(cluster, "lj")
    assert proc.returncode == 0, proc.stderr
    assert "[lj/printer] MARKER-ONE" in proc.stdout and "[lj/other] OTHER-LINE" in proc.stdout
    with _follow(cluster, "lj") as seen:  # and followed: both, interleaved, each line prefixed
        printer.call("say", "JOB-LIVE-1")
        other.call("say", "JOB-LIVE-2")
        printer.call("say", "JOB-LIVE-3")
        wait_until(lambda: sum("JOB-LIVE" in line for line in seen) == 3, timeout=20)
    live = [line.strip() for line in seen if "JOB-LIVE" in line]
    # each file is polled on its own: the order holds within an actor, not across actors
    assert [x for x in live if x.startswith("[lj/printer]")] == [
        "[lj/printer] JOB-LIVE-1", "[lj/printer] JOB-LIVE-3"]
    assert "[lj/other] JOB-LIVE-2" in live

    # unknown names: a clear error
    proc = _logs(cluster, "nobody-here")
    assert proc.returncode != 0 and "no actor and no job named 'nobody-here'" in proc.stderr

    # the coordinator's structured event line for the restart, the worker's for the exit
    log = (cluster.state_dir / "coordinator.log").read_text()
    assert any("event=ACTOR_RESTARTED node=far actor=lj/printer "
               f"incarnation={after['incarnation']} job=lj reason=" in line
               for line in log.splitlines()), log[-3000:]
    log = (cluster.state_dir / "worker-far.log").read_text()
    assert any(f"event=ACTOR_EXITED node=far actor=lj/printer incarnation={before['incarnation']} "
               f"job=lj restart=in_place next_incarnation={after['incarnation']}" in line
               and 'reason="killed by signal SIGKILL' in line for line in log.splitlines()), log[-3000:]

    # the node is gone: a clear error naming it, for a dead actor and for a waiting one
    doomed = client.create_actor(COUNTER, name="lj/doomed", resources={"far": 1}, max_restarts=0)
    doomed.call("say", "DOOMED-LINE")
    assert "DOOMED-LINE" in _logs(cluster, "lj/doomed").stdout
    cluster.worker_procs["far"].kill()
    cluster.worker_procs["far"].wait(10)
    wait_until(lambda: client.actor("lj/doomed")["state"] == "DEAD", timeout=30)
    proc = _logs(cluster, "lj/doomed")
    assert proc.returncode == 1 and "on node far" in proc.stderr and "LOST" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    proc = _logs(cluster, "lj/printer")
    assert proc.returncode == 1 and "node far lost" in proc.stderr, proc.stderr
    proc = _logs(cluster, "lj")  # a job: the others still print, the lost ones say why
    assert "[lj/other] OTHER-LINE" in proc.stdout and "[lj/doomed] (no log: " in proc.stdout
