"""The coordinator's status page in a real browser: a real `ftrl coordinator --http-port 0`
and `ftrl worker`, an actor SIGKILLed and restarted, the page loaded in headless chromium
before and after (its DOM and a screenshot), a tuning experiment with its trials' custom
metrics. And `--http-port` on a port in use."""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import ftrl
from ftrl.wire.security import write_token_file
from tests import procs
from tests.cluster import wait_until
from tests.tools import ensure_binary

ACTOR = "page/counter"


def chromium(binary: str, url: str, profile: Path, *extra: str, budget_ms: int = 6000) -> str:
    """Load `url` headless (the page's script runs for `budget_ms` of virtual time); stdout."""
    argv = [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-dev-shm-usage", f"--user-data-dir={profile}",
            f"--virtual-time-budget={budget_ms}", *extra, url]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def actor_row(dom: str, name: str) -> tuple[dict[str, str], list[str]]:
    """The page's table row of one actor: its data-* attributes and its cells' texts."""
    match = re.search(rf'<tr data-actor="{re.escape(name)}"([^>]*)>(.*?)</tr>', dom, flags=re.S)
    assert match, f"no row for {name} in the page:\n{dom[-3000:]}"
    attrs = dict(re.findall(r'(data-[a-z]+)="([^"]*)"', match.group(1)))
    cells = [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", match.group(2), re.S)]
    return attrs, cells


@pytest.fixture
def cluster(tmp_path):
    """A coordinator with HTTP on a free port and one worker; (address, http port, token)."""
    token_file = tmp_path / "token"
    token = write_token_file(token_file)
    env = procs.env(FTRL_HOME=str(tmp_path / "home"))
    coord_log, worker_log = tmp_path / "coordinator.log", tmp_path / "worker.log"
    coordinator = procs.start(procs.ftrl(
        "coordinator", "--port", "0", "--port-file", str(tmp_path / "port"), "--http-port", "0",
        "--http-port-file", str(tmp_path / "http-port"), "--token-file", str(token_file),
        "--heartbeat-interval", "0.5", "--heartbeat-timeout", "2"), coord_log, env)
    worker = None
    try:
        port = procs.wait_port(tmp_path / "port", coordinator, coord_log)
        http_port = procs.wait_port(tmp_path / "http-port", coordinator, coord_log)
        worker = procs.start(procs.ftrl(
            "worker", "--coordinator", f"127.0.0.1:{port}", "--slots", "2", "--node-id", "page-node",
            "--token-file", str(token_file), "--log-dir", str(tmp_path / "actors"),
            "--actor-hang-timeout", "5"), worker_log, env)
        yield f"127.0.0.1:{port}", http_port, token
    finally:
        procs.stop(worker, coordinator)
        if os.environ.get("FTRL_TEST_SHOW_LOGS"):
            print(procs.tail(coord_log), procs.tail(worker_log), sep="\n")


def test_status_page_shows_a_restarted_actor(cluster, tmp_path):
    binary = ensure_binary("chromium", "chromium")
    address, http_port, token = cluster
    base = f"http://127.0.0.1:{http_port}"
    with ftrl.Client(address, token=token) as client:
        wait_until(lambda: any(n["state"] == "ALIVE" for n in client.nodes()), 20, what="the worker to join")
        client.create_actor("tests.actors:Counter", name=ACTOR, max_restarts=5)
        before = next(a for a in client.actors() if a["name"] == ACTOR)
        assert before["state"] == "ALIVE" and before["pid"] > 0

        # the API and the page before the kill (the token goes in the URL fragment)
        req = urllib.request.Request(f"{base}/api/status", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            api = json.load(r)
        assert [a["name"] for a in api["actors"]] == [ACTOR] and api["nodes"][0]["node_id"] == "page-node"
        dom = chromium(binary, f"{base}/#token={token}", tmp_path / "chrome-1", "--dump-dom")
        attrs, cells = actor_row(dom, ACTOR)
        assert attrs["data-state"] == "ALIVE" and attrs["data-restarts"] == "0", (attrs, cells)
        assert 'data-node="page-node"' in dom and token not in dom

        os.kill(before["pid"], signal.SIGKILL)
        after = wait_until(lambda: next((a for a in client.actors() if a["name"] == ACTOR and a["restarts"] >= 1
                                          and a["state"] == "ALIVE"), None), 20, what="the restart")
        assert after["pid"] != before["pid"]

    dom = chromium(binary, f"{base}/#token={token}", tmp_path / "chrome-2", "--dump-dom")
    attrs, cells = actor_row(dom, ACTOR)
    assert attrs["data-state"] == "ALIVE" and int(attrs["data-restarts"]) >= 1, (attrs, cells)
    death = cells[-1]
    assert "killed by signal SIGKILL" in death and "incarnation 1" in death, cells
    assert cells[0] == ACTOR and cells[2] == "page-node" and cells[3] == str(after["pid"])
    # the event list shows the death and the restart
    assert re.search(r'<tr data-event="DIED">.*?killed by signal SIGKILL', dom, re.S)
    assert '<tr data-event="RESTARTED">' in dom

    shot = tmp_path / "status_page.png"
    chromium(binary, f"{base}/#token={token}", tmp_path / "chrome-3", f"--screenshot={shot}",
             "--window-size=1280,900")
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"status page screenshot: {shot}")


def test_page_without_the_token_is_a_login_form(cluster, tmp_path):
    _, http_port, _ = cluster
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{http_port}/", timeout=10)
    assert e.value.code == 401 and b'action="/login"' in e.value.read()
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/healthz", timeout=10) as r:
        assert r.read() == b"ok\n"  # loopback: open


def _taken_port() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s


@pytest.mark.parametrize("option", ["--http-port", "--port"])
def test_port_in_use_fails_at_once(tmp_path, option):
    with contextlib.closing(_taken_port()) as taken:
        port = taken.getsockname()[1]
        ports = {"--port": "0", "--http-port": "0", option: str(port)}
        t0 = time.monotonic()
        proc = subprocess.run(
            procs.ftrl("coordinator", "--port", ports["--port"], "--http-port", ports["--http-port"],
                       "--port-file", str(tmp_path / "port")),
            capture_output=True, text=True, timeout=30, env=procs.env(FTRL_HOME=str(tmp_path / "home")),
            stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    assert time.monotonic() - t0 < 15
    line = "ftrl coordinator: error: "
    errors = [x for x in proc.stderr.splitlines() if x.startswith(line)]
    assert len(errors) == 1, proc.stderr
    assert f"{option} {port}" in errors[0] and f"cannot listen on 127.0.0.1:{port}" in errors[0], errors
    assert not (tmp_path / "port").exists()


def test_status_page_shows_a_tuning_experiment(cluster, tmp_path):
    """A FIFO experiment of two trials on the cluster: /api/status and the page list it
    with its scheduler actor and its trials (the jobs NAME-T)."""
    binary = ensure_binary("chromium", "chromium")
    address, http_port, token = cluster
    config = (ftrl.PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=0, num_envs_per_env_runner=4)
              .training(train_batch_size=256, minibatch_size=128, num_epochs=1)
              .callbacks("ftrl.testing.callbacks:NegativeReturn"))  # a custom metric on the page
    with ftrl.Client(address, token=token) as client:
        wait_until(lambda: any(n["state"] == "ALIVE" for n in client.nodes()), 20, what="the worker to join")
        results = ftrl.Tuner(config, param_space={"lr": ftrl.tune.grid_search([1e-3, 2e-3])},
                             run_config=ftrl.RunConfig(name="pagexp", storage_path=str(tmp_path / "exp"),
                                                       stop={"iteration": 2}, verbose=0),
                             client=client).fit()
        assert results.num_terminated == 2
    req = urllib.request.Request(f"http://127.0.0.1:{http_port}/api/status",
                                 headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        api = json.load(r)
    (experiment,) = api["experiments"]
    assert experiment["name"] == "pagexp"
    assert [t["trial"] for t in experiment["trials"]] == ["pagexp-0", "pagexp-1"]
    assert all(t["stage"] == "FINISHED" and t["iteration"] == 2 for t in experiment["trials"])
    dom = chromium(binary, f"http://127.0.0.1:{http_port}/#token={token}", tmp_path / "chrome", "--dump-dom")
    assert 'data-experiment="pagexp"' in dom
    assert '<tr data-trial="pagexp-0">' in dom and '<tr data-trial="pagexp-1">' in dom
    # each trial's job shows the custom metrics of its newest row
    assert dom.count('data-metric="neg_return_mean"') == 2, dom[-3000:]
