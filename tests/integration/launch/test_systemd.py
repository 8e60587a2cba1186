"""The rendered systemd units under a real `systemd --user` manager.

`tests/user-systemd.sh` starts `systemd --user` (as root, in a private mount namespace;
see the script) with its own runtime dir. `ftrl systemd-units --user --sandbox` writes
the units there; systemd runs a coordinator and a worker `ftrl-worker@n1`. Then: the
worker is SIGKILLed and systemd restarts it (node back ALIVE, actor back, the node's
failure count kept); the coordinator restarts with a small `--max-node-failures` given
through the env file; the node is pushed past it (EXCLUDED), its worker SIGKILLed
again, and it is still EXCLUDED when systemd brings it back, until `ftrl node readmit`;
finally `systemctl --user stop` drains the worker within TimeoutStopSec, exit status 0.

Everything lives under /run (not /tmp: the sandboxed units have PrivateTmp=yes).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import ftrl
from ftrl.launch.systemd import read_env_file
from ftrl.wire.security import Security, write_token_file
from tests.cluster import REPO, wait_until
from tests.tools import ensure_binary

SCRIPT = REPO / "tests" / "user-systemd.sh"
WORKER = "ftrl-worker@n1"
COORDINATOR = "ftrl-coordinator"
DRAIN_TIMEOUT_S = 10
FAST_COORDINATOR = "--heartbeat-interval 0.5 --heartbeat-timeout 3"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Manager:
    """A running `systemd --user` and the files of one ftrl cluster under it."""

    base: Path
    env: dict[str, str]
    port: int
    token: str

    @property
    def unit_dir(self) -> Path:
        return Path(self.env["XDG_RUNTIME_DIR"]) / "systemd" / "user"

    @property
    def env_file(self) -> Path:
        return self.base / "ftrl.env"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def systemctl(self, *args: str, timeout: float = 30.0, check: bool = True) -> str:
        proc = subprocess.run(["systemctl", "--user", *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        if check and proc.returncode != 0:
            status = subprocess.run(["systemctl", "--user", "status", "--no-pager", COORDINATOR, WORKER],
                                    env=self.env, capture_output=True, text=True, timeout=timeout)
            raise AssertionError(f"systemctl --user {' '.join(args)}: exit {proc.returncode}: "
                                 f"{proc.stderr.strip()}\n{status.stdout}\n{self.logs()}")
        return proc.stdout

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.systemctl("show", "-p", ",".join(props), unit)
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def main_pid(self, unit: str) -> int:
        return int(self.show(unit, "MainPID")["MainPID"])

    def set_env(self, key: str, value: str) -> None:
        """Change one line of the env file (the units read it at every start)."""
        lines = [line for line in self.env_file.read_text().splitlines() if not line.startswith(f"{key}=")]
        self.env_file.write_text("\n".join([*lines, f"{key}={value}", ""]))

    def client(self) -> ftrl.Client:
        return ftrl.Client(self.address, security=Security(token=self.token), timeout=10.0)

    def logs(self) -> str:
        out = []
        for path in sorted((self.base / "log").rglob("*.log")):
            with contextlib.suppress(OSError):
                tail = path.read_text(errors="replace").splitlines()[-30:]
                out.append(f"----- {path.name} -----\n" + "\n".join(tail))
        return "\n".join(out)


@pytest.fixture(scope="module")
def manager(request) -> Iterator[Manager]:
    if os.geteuid() != 0:
        pytest.skip("user-systemd.sh starts systemd --user in a private mount namespace: needs root")
    ensure_binary("systemctl", "systemd")
    ensure_binary("unshare", "util-linux")
    if not Path("/lib/systemd/systemd").exists():
        pytest.skip("no /lib/systemd/systemd to run as a user manager")
    root = Path("/run") if os.access("/run", os.W_OK) else Path("/dev/shm")
    base = Path(tempfile.mkdtemp(prefix="ftrl-systemd-", dir=root))
    script_env = {**os.environ, "USER_SYSTEMD_RUNTIME_DIR": str(base / "rt")}
    failures_before = request.session.testsfailed
    started = subprocess.run([str(SCRIPT), "start"], env=script_env, capture_output=True, text=True,
                             timeout=30)
    try:
        if started.returncode != 0:
            pytest.skip(f"systemd --user did not start here: {started.stderr.strip()[-300:]}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("FTRL_")}
        for line in started.stdout.splitlines():
            if line.startswith("export ") and "=" in line:
                key, _, value = line.removeprefix("export ").partition("=")
                env[key] = value
        assert env.get("XDG_RUNTIME_DIR") == str(base / "rt"), started.stdout
        token = write_token_file(base / "token")
        m = Manager(base=base, env=env, port=_free_port(), token=token)
        yield m
        if request.session.testsfailed > failures_before:
            print(m.logs(), file=sys.stderr)
    finally:
        env = {**script_env, "XDG_RUNTIME_DIR": str(base / "rt")}
        for unit in (WORKER, COORDINATOR):
            subprocess.run(["systemctl", "--user", "kill", "-s", "SIGKILL", unit], env=env,
                           capture_output=True, timeout=30)
        subprocess.run([str(SCRIPT), "stop"], env=script_env, capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


#: A checkout (or venv) under /tmp cannot run sandboxed: PrivateTmp hides it from the unit.
SANDBOX = not any(str(p).startswith(("/tmp/", "/var/tmp/"))
                  for p in (Path(sys.executable).absolute(), Path(__file__).resolve()))


def _render(m: Manager) -> str:
    """`ftrl systemd-units --user --sandbox` into the manager's unit dir (--no-sandbox
    for a checkout under /tmp, which PrivateTmp would hide)."""
    argv = [sys.executable, "-m", "ftrl", "systemd-units", "--user",
            "--sandbox" if SANDBOX else "--no-sandbox",
            "--output", str(m.unit_dir), "--state-dir", str(m.base / "state"),
            "--log-dir", str(m.base / "log"), "--env-file", str(m.env_file),
            "--token-file", str(m.base / "token"), "--host", "127.0.0.1", "--port", str(m.port),
            "--slots", "2", "--drain-timeout", str(DRAIN_TIMEOUT_S), "--node-id", "n1",
            "--worker-arg=--actor-hang-timeout=2"]
    proc = subprocess.run(argv, env=m.env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _node(client: ftrl.Client) -> dict:
    return next(n for n in client.nodes() if n["node_id"] == "n1")


def _actor(client: ftrl.Client, name: str) -> dict:
    return next(a for a in client.actors() if a["name"] == name)


def _kill_actor_process(client: ftrl.Client, name: str) -> None:
    """SIGKILL the actor's process; wait until it is ALIVE again in a new one."""
    old = _actor(client, name)
    os.kill(old["pid"], signal.SIGKILL)
    wait_until(lambda: (a := _actor(client, name))["state"] == "ALIVE" and a["pid"] != old["pid"], 20,
               what=f"{name} restarted after SIGKILL of pid {old['pid']}")


def _kill_worker(m: Manager, restarts_before: int) -> tuple[int, int]:
    """SIGKILL the worker's main process; wait until systemd runs a new one. Returns
    (old pid, new pid)."""
    old = m.main_pid(WORKER)
    assert old > 0
    os.kill(old, signal.SIGKILL)

    def restarted() -> int:
        s = m.show(WORKER, "MainPID", "NRestarts", "ActiveState")
        pid = int(s["MainPID"])
        ok = s["ActiveState"] == "active" and pid not in (0, old) and int(s["NRestarts"]) == restarts_before + 1
        return pid if ok else 0

    new = wait_until(restarted, 20, interval=0.1, what="systemd to restart the worker")
    return old, new


def test_units_under_systemd_user_manager(manager: Manager) -> None:
    m = manager
    t0 = time.monotonic()
    printed = _render(m)
    assert f"systemctl --user enable --now {WORKER}" in printed
    assert read_env_file(m.env_file)["FTRL_COORDINATOR"] == m.address
    assert m.env_file.stat().st_mode & 0o777 == 0o600
    # what the test adds: actors import tests.actors; fast heartbeats
    m.set_env("PYTHONPATH", str(REPO))
    m.set_env("FTRL_COORDINATOR_ARGS", FAST_COORDINATOR)
    m.systemctl("daemon-reload")
    m.systemctl("start", COORDINATOR)
    m.systemctl("start", WORKER)

    with m.client() as client:
        # -- the worker registers; an actor runs on it
        wait_until(lambda: _node(client)["state"] == "ALIVE", 30, what="n1 registered")
        first = _node(client)
        assert first["pid"] == m.main_pid(WORKER)
        # the hardening is in force: no new privileges, a mount namespace of its own (PrivateTmp)
        assert "NoNewPrivs:\t1" in Path(f"/proc/{first['pid']}/status").read_text()
        if SANDBOX:
            assert os.readlink(f"/proc/{first['pid']}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
        client.create_actor("tests.actors:Counter", name="sd/counter", max_restarts=-1)
        assert _actor(client, "sd/counter")["node_id"] == "n1"
        _kill_actor_process(client, "sd/counter")
        failures = wait_until(lambda: _node(client)["failures"], 10, what="the node's failure counted")
        assert failures == 1

        # -- SIGKILL the worker: systemd restarts it; node, actor and failure count come back
        _, new_pid = _kill_worker(m, restarts_before=0)
        wait_until(lambda: (n := _node(client))["pid"] == new_pid and n["state"] == "ALIVE"
                   and n["connected"], 20, what="n1 re-registered by the new worker process")
        wait_until(lambda: (a := _actor(client, "sd/counter"))["state"] == "ALIVE" and a["node_id"] == "n1",
                   20, what="sd/counter ALIVE again on n1")
        assert _node(client)["failures"] == failures, "the node's failures must survive a worker restart"

    # -- restart the coordinator with --max-node-failures 2 (env file; same state dir)
    m.set_env("FTRL_COORDINATOR_ARGS", f"{FAST_COORDINATOR} --max-node-failures 2")
    coordinator_pid = m.main_pid(COORDINATOR)
    m.systemctl("restart", COORDINATOR)
    assert m.main_pid(COORDINATOR) not in (0, coordinator_pid)
    with m.client() as client:
        wait_until(lambda: client.cluster_info()["max_node_failures"] == 2, 20, what="coordinator back")
        wait_until(lambda: (n := _node(client))["state"] == "ALIVE" and n["connected"], 20,
                   what="n1 reconnected to the restarted coordinator")
        assert _node(client)["failures"] == failures, "failures must survive a coordinator restart"
        wait_until(lambda: _actor(client, "sd/counter")["state"] == "ALIVE", 20, what="actor kept")

        # -- two more actor failures: 3 > 2, the node is EXCLUDED
        _kill_actor_process(client, "sd/counter")
        old = _actor(client, "sd/counter")
        os.kill(old["pid"], signal.SIGKILL)
        wait_until(lambda: _node(client)["state"] == "EXCLUDED", 20, what="n1 EXCLUDED")
        assert _node(client)["failures"] == 3

        # -- its worker dies and systemd brings it back: still EXCLUDED
        restarts = int(m.show(WORKER, "NRestarts")["NRestarts"])
        _, new_pid = _kill_worker(m, restarts_before=restarts)
        wait_until(lambda: (n := _node(client))["pid"] == new_pid and n["connected"], 20,
                   what="n1 re-registered after the second SIGKILL")
        node = _node(client)
        assert node["state"] == "EXCLUDED", node
        assert node["failures"] == 3, node

        # -- `ftrl node readmit` takes it back; the waiting actor is placed on it again
        readmit = subprocess.run(
            [sys.executable, "-m", "ftrl", "node", "readmit", "n1", "--coordinator", m.address,
             "--token-file", str(m.base / "token")], env=m.env, capture_output=True, text=True, timeout=30)
        assert readmit.returncode == 0, readmit.stderr
        assert "n1: ALIVE" in readmit.stdout
        assert _node(client)["failures"] == 0
        wait_until(lambda: (a := _actor(client, "sd/counter"))["state"] == "ALIVE" and a["node_id"] == "n1",
                   20, what="sd/counter placed on the re-admitted n1")

    # -- `systemctl stop` drains the worker: it exits 0 well within TimeoutStopSec
    timeout_stop = m.show(WORKER, "TimeoutStopUSec")["TimeoutStopUSec"]
    assert timeout_stop == f"{DRAIN_TIMEOUT_S + 15}s"
    t_stop = time.monotonic()
    m.systemctl("stop", WORKER, timeout=DRAIN_TIMEOUT_S + 30)
    took = time.monotonic() - t_stop
    state = m.show(WORKER, "Result", "ExecMainStatus", "ActiveState")
    assert state == {"Result": "success", "ExecMainStatus": "0", "ActiveState": "inactive"}, \
        (state, m.logs())
    assert took < DRAIN_TIMEOUT_S + 5, (took, timeout_stop)
    log = (m.base / "log" / "worker-n1.log").read_text()
    assert "draining" in log and "exiting" in log
    m.systemctl("stop", COORDINATOR)
    assert m.show(COORDINATOR, "Result")["Result"] == "success"
    print(f"systemd scenario took {time.monotonic() - t0:.1f}s", file=sys.stderr)
