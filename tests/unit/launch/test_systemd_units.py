"""`ftrl systemd-units`: rendering, checking, the committed examples, and
`systemd-analyze verify` (with `--recursive-errors=no`: warnings count) on all of them."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ftrl.cli import main
from ftrl.launch import systemd as sd
from ftrl.launch.systemd import UnitOptions
from ftrl.wire.errors import ConfigError
from tests.procs import REPO
from tests.tools import ensure_binary

EXAMPLES = REPO / "bin" / "systemd"
REGENERATE = ("ftrl systemd-units --python /opt/ftrl/venv/bin/python --output bin/systemd "
              "--units-only")


def _lines(text: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(f"{key}=")]


def _one(text: str, key: str) -> str:
    values = _lines(text, key)
    assert len(values) == 1, (key, values)
    return values[0]


def _opts(tmp_path: Path, **kw) -> UnitOptions:
    base = dict(state_dir=str(tmp_path / "state"), log_dir=str(tmp_path / "log"),
                env_file=str(tmp_path / "ftrl.env"), token_file=str(tmp_path / "token"), sandbox=False)
    return UnitOptions(**{**base, **kw})


# ---------------------------------------------------------------- rendering


def test_defaults_are_system_units_with_restart_kill_mode_limits_and_logs() -> None:
    units = sd.render_units(UnitOptions(python="/opt/py/bin/python"))
    coord, worker = units[sd.COORDINATOR_UNIT], units[sd.WORKER_UNIT]
    for text in (coord, worker):
        assert _one(text, "Restart") == "always"
        assert _one(text, "RestartSec") == "2"
        assert _one(text, "KillMode") == "mixed"
        assert _one(text, "LimitNOFILE") == "65536"
        assert _one(text, "EnvironmentFile") == "/etc/ftrl/ftrl.env"
        assert _one(text, "WantedBy") == "multi-user.target"
        assert _one(text, "StartLimitIntervalSec") == "0"
        assert _one(text, "NoNewPrivileges") == "yes"
        assert _one(text, "PrivateTmp") == "yes"  # system units are sandboxed by default
        assert "FTRL_TOKEN" not in _one(text, "ExecStart")  # never the token on a command line
    assert _one(coord, "ExecStart") == (
        "/opt/py/bin/python -m ftrl coordinator --host 0.0.0.0 --port 6380 --state-dir /var/lib/ftrl "
        "$FTRL_COORDINATOR_ARGS")
    assert _one(worker, "ExecStart") == (
        "/opt/py/bin/python -m ftrl worker --coordinator ${FTRL_COORDINATOR} --node-id %i "
        "--log-dir /var/log/ftrl/actors-%i --drain-timeout 60 $FTRL_WORKER_ARGS")
    assert _one(coord, "StandardOutput") == "append:/var/log/ftrl/coordinator.log"
    assert _one(worker, "StandardError") == "append:/var/log/ftrl/worker-%i.log"
    assert "--http-port" not in coord  # only when asked for
    assert _one(worker, "TasksMax") == "infinity"


@pytest.mark.parametrize("drain", [1.0, 10.0, 60.0, 90.5, 600.0])
def test_stop_timeout_is_longer_than_the_drain(drain: float) -> None:
    worker = sd.render_worker(UnitOptions(drain_timeout_s=drain))
    timeout = int(_one(worker, "TimeoutStopSec"))
    assert timeout >= drain + 10
    assert f"--drain-timeout {sd._seconds(drain)} " in _one(worker, "ExecStart")


def test_options_reach_the_command_lines(tmp_path: Path) -> None:
    o = _opts(tmp_path, host="10.1.2.3", port=7000, http_port=7080, http_host="0.0.0.0",
              slots=4, address="10.1.2.4", drain_timeout_s=30,
              coordinator_args=("--max-node-failures=5",), worker_args=("--gpus=8",))
    coord = _one(sd.render_coordinator(o), "ExecStart")
    worker = _one(sd.render_worker(o), "ExecStart")
    assert coord.split()[4:] == ["--host", "10.1.2.3", "--port", "7000", "--state-dir",
                                 str(tmp_path / "state"), "--http-port", "7080", "--http-host", "0.0.0.0",
                                 "--max-node-failures=5", "$FTRL_COORDINATOR_ARGS"]
    assert worker.split()[4:] == ["--coordinator", "${FTRL_COORDINATOR}", "--node-id", "%i", "--slots", "4",
                                  "--address", "10.1.2.4", "--log-dir", f"{tmp_path}/log/actors-%i",
                                  "--drain-timeout", "30", "--gpus=8", "$FTRL_WORKER_ARGS"]
    env = sd.render_env_file(o)
    assert "FTRL_COORDINATOR=10.1.2.3:7000\n" in env  # workers dial the listen host
    assert f"FTRL_TOKEN_FILE={tmp_path}/token\n" in env
    assert sd.coordinator_argv(o.resolved())[0] == "coordinator"


def test_user_units(tmp_path: Path) -> None:
    home = tmp_path / "home"
    o = UnitOptions(user=True)
    paths = sd.default_paths(True, home)
    assert paths["state_dir"].startswith(str(home)) or os.environ.get("XDG_STATE_HOME")
    text = sd.render_worker(o)
    assert _one(text, "WantedBy") == "default.target"
    assert "network-online.target" not in text  # the user manager has no such target
    assert "PrivateTmp" not in text  # an unprivileged user manager cannot make namespaces
    assert _one(text, "NoNewPrivileges") == "yes"
    assert "PrivateTmp=yes" in sd.render_worker(UnitOptions(user=True, sandbox=True))
    assert "PrivateTmp" not in sd.render_worker(UnitOptions(sandbox=False))


def test_odd_paths_are_quoted_and_escaped(tmp_path: Path) -> None:
    o = _opts(tmp_path, python="/opt/my env/bin/python", state_dir="/srv/100%/$HOME", log_dir="/var/log/a b")
    coord = _one(sd.render_coordinator(o), "ExecStart")
    assert coord.startswith('"/opt/my env/bin/python" -m ftrl coordinator')
    assert "--state-dir /srv/100%%/$$HOME " in coord
    worker = _one(sd.render_worker(o), "ExecStart")
    assert '--log-dir "/var/log/a b/actors-%i"' in worker
    assert _one(sd.render_worker(o), "StandardOutput") == "append:/var/log/a b/worker-%i.log"


def test_relative_paths_become_absolute(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    o = UnitOptions(state_dir="state", log_dir="logs", env_file="ftrl.env", token_file="tok",
                    python="venv/bin/python", sandbox=False).resolved()
    assert (o.state_dir, o.log_dir, o.env_file, o.token_file, o.python) == (
        f"{tmp_path}/state", f"{tmp_path}/logs", f"{tmp_path}/ftrl.env", f"{tmp_path}/tok",
        f"{tmp_path}/venv/bin/python")
    assert UnitOptions(python="sh").resolved().python == shutil.which("sh")  # a command name
    with pytest.raises(ConfigError, match="not on PATH"):
        UnitOptions(python="no-such-python-here").resolved()


@pytest.mark.parametrize("kw, message", [
    ({"port": 0}, "--port must be 1..65535"),
    ({"port": 70000}, "--port must be 1..65535"),
    ({"http_port": 0}, "--http-port"),
    ({"coordinator": "nohost"}, "--coordinator must be HOST:PORT"),
    ({"coordinator": "h:99999"}, "--coordinator must be HOST:PORT"),
    ({"host": "a b"}, "--host must be one word"),
    ({"slots": 0}, "--slots must be > 0"),
    ({"drain_timeout_s": 0}, "--drain-timeout must be > 0"),
    ({"drain_timeout_s": float("inf")}, "--drain-timeout must be > 0"),
    ({"state_dir": "/x\ny"}, "without control characters"),
    ({"worker_args": ("a\nb",)}, "control character"),
])
def test_bad_options_say_what_is_wrong(tmp_path: Path, kw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _opts(tmp_path, **kw).resolved()


def test_sandboxed_units_refuse_state_in_private_tmp() -> None:
    with pytest.raises(ConfigError, match="PrivateTmp"):
        UnitOptions(state_dir="/tmp/ftrl-state").resolved()
    with pytest.raises(ConfigError, match="--token-file"):
        UnitOptions(user=True, sandbox=True, token_file="/var/tmp/token").resolved()
    UnitOptions(state_dir="/tmp/ftrl-state", sandbox=False).resolved()  # fine unsandboxed


# ---------------------------------------------------------------- the committed examples


def test_committed_examples_are_what_the_renderer_makes() -> None:
    for name, text in sd.example_units().items():
        path = EXAMPLES / name
        assert path.is_file(), f"{path} is missing: run `{REGENERATE}`"
        assert path.read_text() == text, f"{path} drifted from the renderer: run `{REGENERATE}`"
        assert "render your own" in text
        assert sd.EXAMPLE_PYTHON in text


# ---------------------------------------------------------------- the command


def test_cli_writes_units_env_file_token_and_dirs(tmp_path: Path, capsys) -> None:
    out = tmp_path / "units"
    argv = ["systemd-units", "--output", str(out), "--user", "--state-dir", str(tmp_path / "state"),
            "--log-dir", str(tmp_path / "log"), "--env-file", str(tmp_path / "etc" / "ftrl.env"),
            "--token-file", str(tmp_path / "etc" / "token"), "--node-id", "gpu-01",
            "--coordinator-arg=--max-node-failures=3"]
    assert main([*argv, "--port", "7100"]) == 0
    printed = capsys.readouterr().out
    for name in (sd.COORDINATOR_UNIT, sd.WORKER_UNIT):
        assert f"wrote {out / name}" in printed
    assert "--max-node-failures=3" in (out / sd.COORDINATOR_UNIT).read_text()
    for line in ("systemctl --user daemon-reload", "systemctl --user enable --now ftrl-coordinator",
                 "systemctl --user enable --now ftrl-worker@gpu-01"):
        assert line in printed
    env_file, token = tmp_path / "etc" / "ftrl.env", tmp_path / "etc" / "token"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert len(token.read_text().strip()) >= 32
    assert sd.read_env_file(env_file) == {
        "FTRL_COORDINATOR": "127.0.0.1:7100", "FTRL_TOKEN_FILE": str(token),
        "FTRL_COORDINATOR_ARGS": "", "FTRL_WORKER_ARGS": ""}
    assert (tmp_path / "state").is_dir() and (tmp_path / "log").is_dir()

    # again with another port: units re-rendered, the env file and token are left alone
    before = env_file.read_text(), token.read_text()
    assert main([*argv, "--port", "7200"]) == 0
    printed = capsys.readouterr().out
    assert (env_file.read_text(), token.read_text()) == before
    assert "FTRL_COORDINATOR=127.0.0.1:7100, not 127.0.0.1:7200" in printed
    assert "--port 7200" in (out / sd.COORDINATOR_UNIT).read_text()


def test_cli_units_only_touches_nothing_else(tmp_path: Path, capsys) -> None:
    assert main(["systemd-units", "--output", str(tmp_path / "u"), "--units-only", "--no-sandbox",
                 "--env-file", str(tmp_path / "ftrl.env"), "--state-dir", str(tmp_path / "s"),
                 "--python", "/opt/nowhere/bin/python"]) == 0
    assert "/opt/nowhere/bin/python is not an executable here" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["u"]
    assert sorted(p.name for p in (tmp_path / "u").iterdir()) == [sd.COORDINATOR_UNIT, sd.WORKER_UNIT]


def test_cli_errors(tmp_path: Path, capsys) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    assert main(["systemd-units", "--output", str(not_a_dir), "--units-only"]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err
    assert main(["systemd-units", "--output", str(tmp_path / "u"), "--port", "0"]) == 2
    assert "--port must be 1..65535" in capsys.readouterr().err
    assert main(["systemd-units", "--output", str(tmp_path / "u"), "--state-dir", "/tmp/s"]) == 2
    assert "--no-sandbox" in capsys.readouterr().err
    assert not (tmp_path / "u").exists()  # nothing written on bad input


# ---------------------------------------------------------------- systemd-analyze verify


@pytest.fixture(scope="module")
def analyze() -> str:
    return ensure_binary("systemd-analyze", "systemd")


def _verify(analyze: str, unit: Path, root: Path | None = None) -> str:
    argv = [analyze, "verify", "--recursive-errors=no"]
    if root is not None:
        argv.append(f"--root={root}")
    proc = subprocess.run([*argv, str(unit)], capture_output=True, text=True, timeout=60)
    return (proc.stdout + proc.stderr).strip()


@pytest.mark.parametrize("user, sandbox", [(False, None), (True, None), (True, True)])
def test_rendered_units_pass_systemd_analyze_verify(analyze: str, tmp_path: Path, user: bool,
                                                   sandbox: bool | None) -> None:
    # an interpreter path with a space: verify fails unless ExecStart is quoted right
    spaced = tmp_path / "my venv" / "bin"
    spaced.mkdir(parents=True)
    (spaced / "python").symlink_to(sys.executable)
    o = UnitOptions(python=str(spaced / "python"), user=user, sandbox=sandbox, http_port=8080,
                    slots=2, address="10.0.0.5", state_dir="/srv/ftrl state",
                    coordinator_args=("--max-node-failures=3",), worker_args=("--gpus=1",))
    for name, text in sd.render_units(o).items():
        (tmp_path / name).write_text(text)
        assert _verify(analyze, tmp_path / name) == "", name


def test_committed_examples_pass_systemd_analyze_verify(analyze: str, tmp_path: Path) -> None:
    # the examples name /opt/ftrl/venv/bin/python: give verify a root where it exists
    python = tmp_path / sd.EXAMPLE_PYTHON.lstrip("/")
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    units = tmp_path / "etc" / "systemd" / "system"
    units.mkdir(parents=True)
    for name in (sd.COORDINATOR_UNIT, sd.WORKER_UNIT):
        shutil.copy(EXAMPLES / name, units / name)
        assert _verify(analyze, units / name, root=tmp_path) == "", name
    # and verify does catch a broken unit this way (the empty output above means something)
    broken = units / "ftrl-broken.service"
    broken.write_text((EXAMPLES / sd.COORDINATOR_UNIT).read_text().replace("KillMode=mixed", "KillMode=bogus"))
    assert "kill mode" in _verify(analyze, broken, root=tmp_path)
