"""systemd units for a cluster: `ftrl-coordinator.service` and `ftrl-worker@.service`.

`render_units(UnitOptions(...))` turns options into the text of both units (the
instance of the worker template is the node id: `ftrl-worker@NODE`), and
`install_units` writes them plus, on first use, an example environment file and a
token file (both 0600). `ftrl systemd-units` is the command line of it.

What the units promise:
- `Restart=always` with `RestartSec=2` and no start rate limit: systemd brings a
  crashed coordinator or worker back for ever. A node that keeps failing is not
  systemd's call: the coordinator counts the node's actor failures across worker
  restarts and EXCLUDES it past `--max-node-failures` (it stays EXCLUDED when its
  worker comes back, until `ftrl node readmit`).
- `KillMode=mixed` (see `_KILL_MODE_COMMENT`): `systemctl stop` drains the worker.
- `TimeoutStopSec` = the worker's `--drain-timeout` + `STOP_MARGIN_S`.
- Settings that change per site (where the coordinator is, the token file, extra
  arguments) live in the `EnvironmentFile`, so they change without re-rendering.
- The token is never on a command line: the env file names the token file
  (`FTRL_TOKEN_FILE`), which `ftrl` reads itself (mode 0600).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import socket
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from ftrl.wire.errors import ConfigError

COORDINATOR_UNIT = "ftrl-coordinator.service"
WORKER_UNIT = "ftrl-worker@.service"
ENV_COORDINATOR = "FTRL_COORDINATOR"
ENV_TOKEN_FILE = "FTRL_TOKEN_FILE"
ENV_COORDINATOR_ARGS = "FTRL_COORDINATOR_ARGS"
ENV_WORKER_ARGS = "FTRL_WORKER_ARGS"

RESTART_SEC = 2
STOP_MARGIN_S = 15  # the worker's last step after its drain: stop what is left, flush reports
COORDINATOR_STOP_TIMEOUT_S = 30
LIMIT_NOFILE = 65536
DEFAULT_PORT = 6380
DEFAULT_DRAIN_TIMEOUT_S = 60.0
EXAMPLE_PYTHON = "/opt/ftrl/venv/bin/python"  # the interpreter of the committed example units

_PRIVATE_TMP_DIRS = ("/tmp", "/var/tmp")
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class UnitOptions:
    """What the two units run. Paths left None get the defaults of `default_paths`.

    python:      the interpreter that runs `-m ftrl` (absolute; a venv's works).
    user:        user units (`systemctl --user`, WantedBy=default.target) instead of
                 system units (WantedBy=multi-user.target).
    sandbox:     systemd sandboxing that needs mount namespaces (PrivateTmp,
                 ProtectSystem=full, ...). None: on for system units, off for user units
                 (an unprivileged user manager cannot set up mount namespaces).
    coordinator: HOST:PORT workers dial (the env file's FTRL_COORDINATOR); default
                 this host's coordinator port on 127.0.0.1.
    coordinator_args / worker_args: extra arguments baked into ExecStart.
    """

    python: str = field(default_factory=lambda: os.path.abspath(sys.executable))
    user: bool = False
    sandbox: bool | None = None
    env_file: str | None = None
    token_file: str | None = None
    state_dir: str | None = None
    log_dir: str | None = None
    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    http_port: int | None = None
    http_host: str | None = None
    coordinator: str | None = None
    slots: int | None = None
    address: str | None = None
    drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S
    coordinator_args: tuple[str, ...] = ()
    worker_args: tuple[str, ...] = ()

    @property
    def sandboxed(self) -> bool:
        return (not self.user) if self.sandbox is None else self.sandbox

    @property
    def stop_timeout_s(self) -> int:
        """The worker's TimeoutStopSec: its drain timeout plus a margin for the last steps."""
        return math.ceil(self.drain_timeout_s) + STOP_MARGIN_S

    def resolved(self, home: Path | None = None) -> UnitOptions:
        """These options with defaults filled in, paths made absolute, values checked
        (ConfigError says what is wrong)."""
        defaults = default_paths(self.user, home)
        python = self.python
        if python and "/" not in python:  # a command name: the interpreter it names here
            found = shutil.which(python)
            if found is None:
                raise ConfigError(f"--python {python!r} is not on PATH; give the interpreter's path")
            python = found
        o = replace(
            self,
            python=_abs_path(python, "--python"),
            env_file=_abs_path(self.env_file or defaults["env_file"], "--env-file"),
            token_file=_abs_path(self.token_file or defaults["token_file"], "--token-file"),
            state_dir=_abs_path(self.state_dir or defaults["state_dir"], "--state-dir"),
            log_dir=_abs_path(self.log_dir or defaults["log_dir"], "--log-dir"),
            coordinator=self.coordinator or f"{_dial_host(self.host)}:{self.port}",
        )
        _check_word(o.host, "--host")
        _check_port(o.port, "--port")
        if o.http_port is not None:
            _check_port(o.http_port, "--http-port")
        if o.http_host is not None:
            _check_word(o.http_host, "--http-host")
        host, sep, port = (o.coordinator or "").rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"--coordinator must be HOST:PORT, got {o.coordinator!r}")
        _check_word(o.coordinator, "--coordinator")
        if o.address is not None:
            _check_word(o.address, "--address")
        if o.slots is not None and o.slots <= 0:
            raise ConfigError(f"--slots must be > 0, got {o.slots}")
        if not (o.drain_timeout_s > 0 and math.isfinite(o.drain_timeout_s)):
            raise ConfigError(f"--drain-timeout must be > 0 seconds, got {o.drain_timeout_s:g}")
        for arg in (*o.coordinator_args, *o.worker_args):
            if _BAD_CHARS.search(arg):
                raise ConfigError(f"extra argument {arg!r} holds a control character")
        if o.sandboxed:
            for what, path in (("--state-dir", o.state_dir), ("--log-dir", o.log_dir),
                               ("--token-file", o.token_file)):
                if any(path == d or path.startswith(d + "/") for d in _PRIVATE_TMP_DIRS):  # type: ignore[union-attr]
                    raise ConfigError(
                        f"{what} {path} is under /tmp or /var/tmp, which the sandboxed units see as "
                        "an empty private directory (PrivateTmp=yes; state would be lost at every "
                        "restart): choose another path, or give --no-sandbox")
        return o


def default_paths(user: bool, home: Path | None = None) -> dict[str, str]:
    """Where things go unless told: /etc/ftrl, /var/lib/ftrl, /var/log/ftrl for system
    units; ~/.config/ftrl and ~/.local/state/ftrl for user units."""
    if not user:
        return {"env_file": "/etc/ftrl/ftrl.env", "token_file": "/etc/ftrl/token",
                "state_dir": "/var/lib/ftrl", "log_dir": "/var/log/ftrl"}
    home = home or Path.home()
    config = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "ftrl"
    state = Path(os.environ.get("XDG_STATE_HOME") or home / ".local" / "state") / "ftrl"
    return {"env_file": str(config / "ftrl.env"), "token_file": str(config / "token"),
            "state_dir": str(state), "log_dir": str(state / "log")}


# ---------------------------------------------------------------- arguments


class Raw(str):
    """An ExecStart word written as is: a specifier (`%i`) or `${VAR}` expansion."""


def coordinator_argv(o: UnitOptions) -> list[str]:
    """`ftrl coordinator` arguments of the unit (options resolved)."""
    argv = ["coordinator", "--host", o.host, "--port", str(o.port), "--state-dir", str(o.state_dir)]
    if o.http_port is not None:
        argv += ["--http-port", str(o.http_port)]
    if o.http_host is not None:
        argv += ["--http-host", o.http_host]
    return argv + list(o.coordinator_args)


def worker_argv(o: UnitOptions) -> list[str]:
    """`ftrl worker` arguments of the unit (options resolved); the node id is the
    instance name (`%i`: escaped as unit names are, so `gpu-01` stays `gpu-01`)."""
    argv = ["worker", "--coordinator", Raw(f"${{{ENV_COORDINATOR}}}"), "--node-id", Raw("%i")]
    if o.slots is not None:
        argv += ["--slots", str(o.slots)]
    if o.address is not None:
        argv += ["--address", o.address]
    argv += ["--log-dir", Raw(_quote(f"{o.log_dir}/actors-", raw="%i")), "--drain-timeout", _seconds(o.drain_timeout_s)]
    return argv + list(o.worker_args)


def exec_start(o: UnitOptions, argv: list[str], env_args: str) -> str:
    """The ExecStart line: `PYTHON -m ftrl ARGV... $ENV_ARGS` (zero or more words)."""
    words = [_quote(o.python), "-m", "ftrl"] + [w if isinstance(w, Raw) else _quote(w) for w in argv]
    return " ".join([*words, f"${env_args}"])


def _escape(word: str) -> str:
    """Escape systemd's specifier (%) and variable ($) characters and backslashes."""
    return word.replace("\\", "\\\\").replace("%", "%%").replace("$", "$$")


def _quote(word: str, raw: str = "") -> str:
    """One ExecStart word: `word` escaped, then `raw` (a specifier) as is; double-quoted
    if it has spaces or quotes."""
    text = _escape(word) + raw
    if text and not re.search(r"[\s\"';]", text):
        return text
    return '"' + text.replace('"', '\\"') + '"'


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


# ---------------------------------------------------------------- units

_KILL_MODE_COMMENT = """\
# KillMode=mixed: `systemctl stop` sends SIGTERM to the worker alone, which drains
# its actors (each may checkpoint, the coordinator moves it to another node); had
# the actors got SIGTERM too (control-group) they would die mid-drain and count as
# failures of this node. What is still running when TimeoutStopSec ends gets
# SIGKILL, the whole cgroup (KillMode=process would leave actors behind). If the
# worker itself dies, its actors die with it (PR_SET_PDEATHSIG), so a restart
# starts clean."""

# Only settings seen working under a real manager (tests/integration/launch/test_systemd.py).
# Left out on purpose: ProtectKernelTunables (226/NAMESPACE on the CI VM),
# ProtectControlGroups (there it mounted an empty tmpfs over /run), PrivateDevices and
# DeviceAllow/ProtectClock (they would hide GPUs), ProtectSystem=strict and ProtectHome
# (actors write job outputs; venvs live in home directories).
_SANDBOX = [
    "PrivateTmp=yes",
    "ProtectSystem=full",
    "ProtectKernelModules=yes",
]
_BASIC_HARDENING = ["NoNewPrivileges=yes", "RestrictSUIDSGID=yes", "LockPersonality=yes"]


def _header(unit: str, what: str, o: UnitOptions) -> list[str]:
    scope = " --user" if o.user else ""
    where = "~/.config/systemd/user" if o.user else "/etc/systemd/system"
    return [
        f"# {unit}: {what}",
        "# Made by `ftrl systemd-units`; render your own (interpreter, paths, ports) with",
        f"#   ftrl systemd-units{scope} --output {where} [--state-dir D] [--log-dir D] [--port P] ...",
        f"# Site settings (coordinator address, token file, extra arguments) are in {o.env_file};",
        f"# change them there, then `systemctl{scope} restart` the unit.",
    ]


def _service_common(o: UnitOptions, log_name: str, raw: str = "") -> list[str]:
    log = _escape(f"{o.log_dir}/{log_name}") + raw
    return [
        f"EnvironmentFile={_escape(str(o.env_file))}",
        "Environment=PYTHONUNBUFFERED=1",
        "Restart=always",
        f"RestartSec={RESTART_SEC}",
        f"LimitNOFILE={LIMIT_NOFILE}",
        "# systemd opens the log before anything else: the directory must exist already",
        f"StandardOutput=append:{log}",
        f"StandardError=append:{log}",
        *_BASIC_HARDENING,
        *(_SANDBOX if o.sandboxed else []),
    ]


def _unit_section(description: str, o: UnitOptions, worker: bool = False) -> list[str]:
    lines = ["[Unit]", f"Description={description}"]
    if not o.user:
        lines += ["Wants=network-online.target", "After=network-online.target"]
    if worker:
        lines.append(f"After={COORDINATOR_UNIT}")  # when both run on one machine
    # no start rate limit: Restart=always means for ever (the coordinator excludes bad nodes)
    return [*lines, "StartLimitIntervalSec=0"]


def _install(o: UnitOptions) -> list[str]:
    return ["", "[Install]", f"WantedBy={'default.target' if o.user else 'multi-user.target'}", ""]


def render_coordinator(options: UnitOptions) -> str:
    """The text of ftrl-coordinator.service."""
    o = options.resolved()
    lines = _header(COORDINATOR_UNIT, "the ftrl control plane (one per cluster)", o)
    lines += _unit_section("ftrl coordinator (control plane)", o)
    lines += [
        "",
        "[Service]",
        "Type=exec",
        f"ExecStart={exec_start(o, coordinator_argv(o), ENV_COORDINATOR_ARGS)}",
        "# SIGTERM stops it at once; its state (--state-dir, SQLite WAL) is saved on every change",
        "KillMode=mixed",
        f"TimeoutStopSec={COORDINATOR_STOP_TIMEOUT_S}",
        *_service_common(o, "coordinator.log"),
    ]
    return "\n".join(lines + _install(o))


def render_worker(options: UnitOptions) -> str:
    """The text of the template ftrl-worker@.service (instance = node id)."""
    o = options.resolved()
    lines = _header(WORKER_UNIT, "one ftrl node agent; the instance is the node id", o)
    lines.append("#   systemctl" + (" --user" if o.user else "") + " enable --now ftrl-worker@$(hostname -s)")
    lines += _unit_section("ftrl worker %i (node agent)", o, worker=True)
    lines += [
        "",
        "[Service]",
        "Type=exec",
        f"ExecStart={exec_start(o, worker_argv(o), ENV_WORKER_ARGS)}",
        _KILL_MODE_COMMENT,
        "KillMode=mixed",
        f"# the drain takes at most --drain-timeout ({_seconds(o.drain_timeout_s)} s); {STOP_MARGIN_S} s more "
        "for stopping what is left",
        f"TimeoutStopSec={o.stop_timeout_s}",
        *_service_common(o, "worker-", raw="%i.log"),
        "# actors are threads-heavy (torch): the default TasksMax (15% of pid_max) is too small",
        "TasksMax=infinity",
    ]
    return "\n".join(lines + _install(o))


def render_env_file(options: UnitOptions) -> str:
    """An example environment file for both units (written 0600 when there is none)."""
    o = options.resolved()
    return "\n".join([
        "# ftrl cluster settings, read by ftrl-coordinator.service and ftrl-worker@.service",
        "# (EnvironmentFile=). Keep it mode 0600; restart the units after a change.",
        "#",
        "# HOST:PORT of the coordinator as workers (and `ftrl status`) reach it",
        f"{ENV_COORDINATOR}={o.coordinator}",
        "# the file holding the cluster token (one line, mode 0600, the same on every node);",
        "# ftrl reads it itself, the token never appears on a command line",
        f"{ENV_TOKEN_FILE}={o.token_file}",
        "# extra arguments, split at spaces, e.g. FTRL_WORKER_ARGS=--gpus 8 --preload torch",
        f"{ENV_COORDINATOR_ARGS}=",
        f"{ENV_WORKER_ARGS}=",
        "",
    ])


def render_units(options: UnitOptions) -> dict[str, str]:
    """{file name: text} of both units."""
    return {COORDINATOR_UNIT: render_coordinator(options), WORKER_UNIT: render_worker(options)}


# ---------------------------------------------------------------- writing


@dataclass
class Installed:
    """What `install_units` did."""

    units: list[Path] = field(default_factory=list)
    created: list[str] = field(default_factory=list)  # lines saying what else was made
    notes: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)


def install_units(options: UnitOptions, output: str | Path, node_id: str | None = None,
                  units_only: bool = False) -> Installed:
    """Write both units into `output`; unless `units_only`, make the env file, the token
    file and the state and log directories when they do not exist. Returns what was
    done and the `systemctl` commands to run next."""
    o = options.resolved()
    out = Path(output).expanduser().absolute()
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--output {out} exists and is not a directory")
    result = Installed()
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in render_units(o).items():
            path = out / name
            _write(path, text, 0o644)
            result.units.append(path)
    except OSError as e:
        raise ConfigError(f"cannot write the units into {out}: {e.strerror or e}") from e

    if not os.access(str(o.python), os.X_OK):
        result.notes.append(f"{o.python} is not an executable here (fine if the units are for "
                            "another machine; ExecStart runs it with -m ftrl)")
    if not units_only:
        _set_up(o, result)
    scope = " --user" if o.user else ""
    node = node_id or _default_node_id()
    result.commands = [
        f"systemctl{scope} daemon-reload",
        f"systemctl{scope} enable --now {COORDINATOR_UNIT.removesuffix('.service')}",
        f"systemctl{scope} enable --now ftrl-worker@{node}",
    ]
    return result


def example_units() -> dict[str, str]:
    """The committed examples in bin/systemd/: default options, EXAMPLE_PYTHON."""
    return render_units(UnitOptions(python=EXAMPLE_PYTHON))


def _set_up(o: UnitOptions, result: Installed) -> None:
    """Make what the units need and is missing: env file, token file, directories."""
    from ftrl.wire.security import read_token_file, write_token_file

    env_file = Path(str(o.env_file))
    if env_file.exists():
        result.notes += _env_file_notes(env_file, o)
    else:
        _made(result, env_file, "example environment file (0600)",
              lambda: _write(env_file, render_env_file(o), 0o600, parents=True))
    token = Path(str(o.token_file))
    if token.exists():
        try:
            read_token_file(str(token))
        except ConfigError as e:
            result.notes.append(str(e))
        else:
            if token.stat().st_mode & 0o077:
                result.notes.append(f"token file {token} is readable by others: chmod 600 {token}")
    else:
        _made(result, token, "token file (0600, a new random token: copy it to every node)",
              lambda: write_token_file(token))
    for what, directory, mode in (("state directory", o.state_dir, 0o700), ("log directory", o.log_dir, 0o755)):
        path = Path(str(directory))
        if not path.is_dir():
            _made(result, path, what, lambda p=path, m=mode: p.mkdir(parents=True, mode=m))


def _made(result: Installed, path: Path, what: str, make) -> None:
    try:
        make()
    except OSError as e:
        result.notes.append(f"could not make the {what} {path} ({e.strerror or e}): make it before starting")
    else:
        result.created.append(f"{what}: {path}")


def _write(path: Path, text: str, mode: int, parents: bool = False) -> None:
    """Write `text` atomically with `mode`."""
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of an environment file (comments and blank lines skipped)."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key.strip()] = value
    return out


def _env_file_notes(env_file: Path, o: UnitOptions) -> list[str]:
    """Say where an existing env file disagrees with the options given (it is left alone)."""
    try:
        env = read_env_file(env_file)
    except OSError as e:
        return [f"cannot read {env_file}: {e.strerror}"]
    notes = []
    for key, want in ((ENV_COORDINATOR, o.coordinator), (ENV_TOKEN_FILE, o.token_file)):
        have = env.get(key)
        if have is None:
            notes.append(f"{env_file} does not set {key}: add {key}={want}")
        elif have != want:
            notes.append(f"{env_file} (left as it is) says {key}={have}, not {want}")
    return notes


def describe(result: Installed, user: bool) -> str:
    """What `install_units` did and what to run next, for a person."""
    lines = [f"wrote {path}" for path in result.units]
    lines += [f"made {what}" for what in result.created]
    lines += [f"note: {note}" for note in result.notes]
    lines += ["", "next:" if not user else "next (user manager):"]
    return "\n".join(lines + [f"  {c}" for c in result.commands])


# ---------------------------------------------------------------- command line


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `ftrl systemd-units`."""
    p.add_argument("--output", required=True, metavar="DIR",
                   help="where to write the units (e.g. /etc/systemd/system, ~/.config/systemd/user)")
    p.add_argument("--user", action="store_true",
                   help="user units (systemctl --user, WantedBy=default.target; paths under ~)")
    p.add_argument("--sandbox", action=argparse.BooleanOptionalAction, default=None,
                   help="mount-namespace sandboxing (PrivateTmp, ProtectSystem=full, ...): default on "
                   "for system units, off for user units")
    p.add_argument("--python", default=os.path.abspath(sys.executable), metavar="PATH",
                   help="interpreter with ftrl installed (default: this one, %(default)s)")
    p.add_argument("--env-file", metavar="F", help="EnvironmentFile of both units "
                   "(default /etc/ftrl/ftrl.env; an example is written if it does not exist)")
    p.add_argument("--token-file", metavar="F", help="cluster token file, named in the env file "
                   "(default /etc/ftrl/token; made, 0600, if it does not exist)")
    p.add_argument("--state-dir", metavar="D", help="coordinator state (default /var/lib/ftrl)")
    p.add_argument("--log-dir", metavar="D", help="unit and actor logs (default /var/log/ftrl)")
    p.add_argument("--host", default="0.0.0.0", help="coordinator listen address (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="coordinator port (default 6380)")
    p.add_argument("--http-port", type=int, metavar="P", help="coordinator HTTP status port")
    p.add_argument("--http-host", metavar="H", help="coordinator HTTP listen address")
    p.add_argument("--coordinator", metavar="HOST:PORT",
                   help="where workers find the coordinator (env file; default 127.0.0.1:PORT)")
    p.add_argument("--slots", type=int, metavar="N", help="worker CPU slots (default: CPU count)")
    p.add_argument("--address", metavar="A", help="address the worker's actors listen on")
    p.add_argument("--drain-timeout", type=float, default=DEFAULT_DRAIN_TIMEOUT_S, metavar="S",
                   help="worker drain on stop (default 60; TimeoutStopSec is S + 15)")
    p.add_argument("--coordinator-arg", action="append", default=[], metavar="ARG",
                   help="one more coordinator argument, e.g. --coordinator-arg=--max-node-failures=5")
    p.add_argument("--worker-arg", action="append", default=[], metavar="ARG",
                   help="one more worker argument, e.g. --worker-arg=--gpus=8")
    p.add_argument("--node-id", metavar="ID", help="node id in the printed commands (default: host name)")
    p.add_argument("--units-only", action="store_true",
                   help="write the units only: no env file, token file or directories")


def options_from_args(args: argparse.Namespace) -> UnitOptions:
    """UnitOptions of `ftrl systemd-units` arguments."""
    return UnitOptions(
        python=args.python, user=args.user, sandbox=args.sandbox, env_file=args.env_file,
        token_file=args.token_file, state_dir=args.state_dir, log_dir=args.log_dir, host=args.host,
        port=args.port, http_port=args.http_port, http_host=args.http_host,
        coordinator=args.coordinator, slots=args.slots, address=args.address,
        drain_timeout_s=args.drain_timeout, coordinator_args=tuple(args.coordinator_arg),
        worker_args=tuple(args.worker_arg),
    )


# ---------------------------------------------------------------- helpers


def _abs_path(path: str, what: str) -> str:
    if not path or _BAD_CHARS.search(path):
        raise ConfigError(f"{what} must be a path without control characters, got {path!r}")
    return os.path.abspath(os.path.expanduser(path))


def _check_word(value: str, what: str) -> None:
    if not value or re.search(r"[\s\x00-\x1f\x7f]", value):
        raise ConfigError(f"{what} must be one word without spaces, got {value!r}")


def _check_port(port: int, what: str) -> None:
    if not 0 < port < 65536:
        raise ConfigError(f"{what} must be 1..65535 (workers must know it), got {port}")


def _dial_host(host: str) -> str:
    """The address to reach a coordinator listening on `host`."""
    return "127.0.0.1" if host in ("0.0.0.0", "", "::", "[::]") else host


def _default_node_id() -> str:
    name = socket.gethostname().split(".")[0]
    return name if re.fullmatch(r"[A-Za-z0-9_.:-]+", name) else "NODE"


__all__ = [
    "COORDINATOR_UNIT", "EXAMPLE_PYTHON", "WORKER_UNIT", "Installed", "UnitOptions", "add_arguments",
    "coordinator_argv", "default_paths", "describe", "example_units", "install_units", "options_from_args",
    "read_env_file", "render_coordinator", "render_env_file", "render_units", "render_worker",
    "worker_argv",
]
