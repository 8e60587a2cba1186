"""An embedded local cluster: a real coordinator and real workers as subprocesses.

    with ftrl.local_cluster(workers=1, slots=4) as cluster:
        client = cluster.client()

Used by `ftrl train` without --coordinator (with its state dir in the run's output
directory, `fresh` so an earlier run's jobs are not resumed) and by the integration
tests. The cluster makes its own token (a 0600 file in its state dir), listens on
127.0.0.1 only, and is torn down on exit (and, through PR_SET_PDEATHSIG, if
the process that started it dies; Linux ties that signal to the starting
*thread*, so start a cluster from a thread that outlives it, e.g. the main one).
Its processes run in their own session, so a Ctrl-C at the terminal reaches
only the process that owns the cluster, which decides how to stop.

`start()` starts the coordinator, then the workers, and returns once they joined.
`launch()` starts them all at once (on a port picked here, so workers need not wait
for the coordinator's port file) and returns: the workers' warm spares import while
the coordinator starts and the caller does work of its own (`ftrl train` checks its
job); `wait_coordinator()` and `wait_nodes()` then wait for them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ftrl.client.client import Client
from ftrl.wire.errors import FtrlError, FtrlTimeoutError
from ftrl.wire.security import Security, write_token_file

log = logging.getLogger(__name__)

#: How long a `fresh` cluster waits for the coordinator of an earlier run in its state dir
#: to exit: one whose owner was just killed gets SIGTERM from Linux and needs a second or
#: two to stop; a run that is really still going is refused after this.
FRESH_WAIT_S = 15.0

#: How often a coordinator that exits at once is started again on another picked port
#: (the picked port may be taken by another process before the coordinator binds it).
PORT_ATTEMPTS = 3


def free_port(host: str = "127.0.0.1") -> int:
    """A port that nothing is bound to now, as the kernel picks one."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class LocalCluster:
    """Processes of a one-machine cluster; see the module docstring."""

    def __init__(
        self,
        workers: int = 1,
        slots: int | None = None,
        *,
        state_dir: str | None = None,
        heartbeat_interval: float = 1.0,
        heartbeat_timeout: float = 5.0,
        actor_hang_timeout: float = 10.0,
        preload: str = "",
        spares: int = 1,
        max_node_failures: int | None = None,
        log_level: str = "INFO",
        auth: bool = True,
        port: int = 0,
        env: dict[str, str] | None = None,
        worker_args: list[str] | None = None,
        fresh: bool = False,
    ) -> None:
        self._own_dir = state_dir is None
        self.state_dir = Path(state_dir or tempfile.mkdtemp(prefix="ftrl-local-"))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if fresh:  # forget the jobs and actors an earlier cluster in this dir left
            self._wait_state_dir_free()
            shutil.rmtree(self.coordinator_state_dir, ignore_errors=True)
        self.num_workers = workers
        self.slots = slots
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.actor_hang_timeout = actor_hang_timeout
        self.preload = preload
        self.spares = spares
        # Excluding a node moves its actors to others; on a one-worker cluster there are
        # none, so exclusion would only stop the run (chaos at one kill per second would
        # exclude the only node after 100 s): by default only clusters of 2+ workers exclude.
        self.max_node_failures = (100 if workers > 1 else -1) if max_node_failures is None else max_node_failures
        self.log_level = log_level
        self.port = port
        self.env = {**os.environ, **(env or {}), "FTRL_DIE_WITH_PARENT": "1"}
        # Actors import user code by path: let them find modules next to the caller,
        # as `python script.py` would.
        path = self.env.get("PYTHONPATH", "")
        if os.getcwd() not in path.split(os.pathsep):
            self.env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), path) if p)
        self.env.pop("FTRL_TOKEN", None)
        self.worker_args = worker_args or []
        self.token_file = self.state_dir / "token"
        self.token = write_token_file(self.token_file) if auth else None
        self.coordinator_proc: subprocess.Popen | None = None
        self.worker_procs: dict[str, subprocess.Popen] = {}
        self._worker_launch: dict[str, tuple[int | None, list[str] | None]] = {}  # slots, extra
        self._port_picked = False  # the port was picked here, not given: another may be tried
        self._clients: list[Client] = []

    def _wait_state_dir_free(self) -> None:
        """Wait (up to FRESH_WAIT_S) until no coordinator holds this cluster's state dir."""
        from ftrl.coordinator.store import in_use

        deadline = time.monotonic() + FRESH_WAIT_S
        if in_use(self.coordinator_state_dir):
            log.warning("waiting up to %gs for the coordinator of an earlier run in %s to exit",
                        FRESH_WAIT_S, self.coordinator_state_dir)
        while in_use(self.coordinator_state_dir):
            if time.monotonic() >= deadline:
                raise FtrlError(f"{self.coordinator_state_dir} is in use by a running coordinator "
                                "(another run on the same output directory?); wait for it or "
                                "choose another output")
            time.sleep(0.05)

    # ---------------------------------------------------------------- addresses

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def coordinator_state_dir(self) -> Path:
        """The coordinator's --state-dir (its durable jobs and actors)."""
        return self.state_dir / "coordinator"

    @property
    def security(self) -> Security:
        return Security(token=self.token)

    def client(self, **kwargs) -> Client:
        """A sync client of this cluster (closed with the cluster)."""
        client = Client(self.address, security=self.security, **kwargs)
        self._clients.append(client)
        return client

    def _python(self, *args: str) -> list[str]:
        base = [sys.executable, "-m", "ftrl", "--log-level", self.log_level, *args]
        if self.token:
            base += ["--token-file", str(self.token_file)]
        else:
            base += ["--insecure"]  # auth=False: no token at all (benchmarks of auth)
        return base

    def _log(self, name: str):
        return open(self.state_dir / f"{name}.log", "ab")

    # ---------------------------------------------------------------- processes

    @property
    def _port_file(self) -> Path:
        return self.state_dir / "coordinator.port"

    def start_coordinator(self, timeout: float = 30.0, extra: list[str] | None = None) -> None:
        """Start the coordinator (again: on the same port) and wait until it serves."""
        self._spawn_coordinator(extra)
        self._wait_port_file(timeout)

    def _spawn_coordinator(self, extra: list[str] | None = None) -> None:
        port_file = self._port_file
        with contextlib.suppress(FileNotFoundError):
            port_file.unlink()
        cmd = self._python(
            "coordinator", "--host", "127.0.0.1", "--port", str(self.port),
            "--port-file", str(port_file), "--state-dir", str(self.coordinator_state_dir),
            "--heartbeat-interval", str(self.heartbeat_interval),
            "--heartbeat-timeout", str(self.heartbeat_timeout),
            "--max-node-failures", str(self.max_node_failures), *(extra or []),
        )
        with self._log("coordinator") as log:
            self.coordinator_proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=self.env,
                                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def _wait_port_file(self, timeout: float) -> None:
        """Wait until the coordinator wrote its port file (it serves); FtrlError if it exited."""
        assert self.coordinator_proc is not None
        port_file = self._port_file
        deadline = time.monotonic() + timeout
        while not port_file.exists():
            if self.coordinator_proc.poll() is not None:
                raise FtrlError(f"coordinator exited with code {self.coordinator_proc.returncode}; "
                                f"see {self.state_dir / 'coordinator.log'}")
            if time.monotonic() > deadline:
                raise FtrlTimeoutError(f"coordinator did not start within {timeout:g}s")
            time.sleep(0.01)
        self.port = int(port_file.read_text().strip())

    def launch(self) -> LocalCluster:
        """Start the coordinator and the workers without waiting for them. Without a
        given port one is picked here so the workers can start at once (they retry
        until the coordinator serves). Then `wait_coordinator()`, and `wait_nodes()`
        for the workers to have joined (actors created before wait there)."""
        if self.port == 0:
            self.port, self._port_picked = free_port(), True
        self._spawn_coordinator()
        for _ in range(self.num_workers):
            self.start_worker()
        return self

    def wait_coordinator(self, timeout: float = 30.0) -> None:
        """Wait until the launched coordinator serves. One that exits at once on a port
        picked here (taken meanwhile) is started again on another, with the workers."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self._wait_port_file(timeout)
                return
            except FtrlTimeoutError:
                raise
            except FtrlError:
                if not self._port_picked or attempt == PORT_ATTEMPTS:
                    raise
            self.port = free_port()
            for node_id, proc in list(self.worker_procs.items()):
                proc.kill()  # it knows the wrong port; its spares die with it
                proc.wait(10.0)
                slots, extra = self._worker_launch[node_id]
                self.start_worker(node_id, slots, extra)
            self._spawn_coordinator()

    def start_worker(self, node_id: str | None = None, slots: int | None = None,
                     extra: list[str] | None = None) -> str:
        """Start one more worker; its node id. It dies with the *thread* that started it
        (PR_SET_PDEATHSIG follows the parent thread): call it from one that lives as long
        as the cluster should."""
        node_id = node_id or f"local-{len(self.worker_procs)}"
        self._worker_launch[node_id] = (slots, extra)
        cmd = self._python(
            "worker", "--coordinator", self.address, "--node-id", node_id,
            "--actor-hang-timeout", str(self.actor_hang_timeout), "--spares", str(self.spares),
            "--log-dir", str(self.state_dir / "logs" / node_id), *self.worker_args, *(extra or []),
        )
        if slots or self.slots:
            cmd += ["--slots", str(slots or self.slots)]
        if self.preload:
            cmd += ["--preload", self.preload]
        with self._log(f"worker-{node_id}") as log:
            self.worker_procs[node_id] = subprocess.Popen(cmd, stdout=log, stderr=log, env=self.env,
                                                          stdin=subprocess.DEVNULL, start_new_session=True)
        return node_id

    def wait_nodes(self, node_ids: list[str], timeout: float = 60.0) -> None:
        """Wait until every node in `node_ids` is ALIVE and connected."""
        client = Client(self.address, security=self.security, timeout=5.0)
        deadline = time.monotonic() + timeout
        try:
            while True:
                with contextlib.suppress(FtrlError):
                    nodes = {n["node_id"]: n for n in client.nodes()}
                    if all(nodes.get(i, {}).get("state") == "ALIVE" and nodes[i]["connected"]
                           for i in node_ids):
                        return
                for node_id in node_ids:
                    proc = self.worker_procs.get(node_id)
                    if proc is not None and proc.poll() is not None:
                        raise FtrlError(f"worker {node_id} exited with code {proc.returncode}; see "
                                        f"{self.state_dir / f'worker-{node_id}.log'}")
                if time.monotonic() > deadline:
                    raise FtrlTimeoutError(f"workers {node_ids} did not join within {timeout:g}s")
                time.sleep(0.05)
        finally:
            client.close()

    def start(self, timeout: float = 60.0) -> LocalCluster:
        """Start the coordinator, then the workers; return once every worker joined.
        (Workers started beside the coordinator, as `launch()` does, first fail to reach
        it and join ~0.2 s later; their spares start sooner, which `ftrl train` wants.)"""
        try:
            self.start_coordinator()
            ids = [self.start_worker() for _ in range(self.num_workers)]
            self.wait_nodes(ids, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    @staticmethod
    def _end(proc: subprocess.Popen | None, timeout: float) -> None:
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def stop(self) -> None:
        """Stop workers (SIGINT: they stop their actors at once; SIGTERM would drain them
        first), then the coordinator."""
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.close()
        self._clients.clear()
        for proc in self.worker_procs.values():
            with contextlib.suppress(ProcessLookupError):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGCONT)
                    proc.send_signal(signal.SIGINT)
        for proc in self.worker_procs.values():
            try:
                proc.wait(10.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self._end(self.coordinator_proc, 10.0)
        if self._own_dir and os.environ.get("FTRL_KEEP_LOCAL_CLUSTER") != "1":
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        if self.coordinator_proc is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def local_cluster(workers: int = 1, slots: int | None = None, **kwargs) -> LocalCluster:
    """Start an embedded cluster; use it as a context manager to tear it down."""
    return LocalCluster(workers, slots, **kwargs).start()
