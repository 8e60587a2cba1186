"""Network namespaces and veth pairs for partition tests (needs root and `ip netns`).

Everything made here is named `ftrl<pid>...` and uses private /30 subnets of
10.199-10.254.x.0 that no interface or route on this machine uses yet; traffic
only ever flows between this machine and its own namespaces. `Netns.close()`
kills the processes left inside the namespace and deletes the namespace and the
veth pairs, also after a failed test.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import random
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

_counter = itertools.count()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=check)


def netns_unavailable() -> str | None:
    """Why netns tests cannot run here, or None if they can."""
    if shutil.which("ip") is None:
        return "the `ip` tool (iproute2) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (run the netns tests as root)"
    name = f"ftrlprobe{os.getpid()}"
    try:
        probe = _ip("netns", "add", name, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return f"`ip netns add` failed: {e}"
    if probe.returncode != 0:
        return f"`ip netns add` is not permitted here: {probe.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


def _used_networks() -> list[ipaddress.IPv4Network]:
    nets = []
    for line in _ip("-4", "-o", "addr", "show").stdout.splitlines():
        parts = line.split()
        if "inet" in parts:
            nets.append(ipaddress.ip_interface(parts[parts.index("inet") + 1]).network)
    for line in _ip("-4", "route", "show", "table", "all").stdout.splitlines():
        first = line.split()[0] if line.split() else ""
        if first in ("local", "broadcast", "unreachable", "blackhole", "prohibit", "throw"):
            first = line.split()[1]
        with contextlib.suppress(ValueError):
            if first != "default":
                nets.append(ipaddress.ip_network(first, strict=False))
    return nets


def free_subnet() -> ipaddress.IPv4Network:
    """A private /30 that overlaps nothing configured on this machine."""
    used = _used_networks()
    rng = random.Random(os.getpid() * 1000 + next(_counter))
    for _ in range(1000):
        net = ipaddress.ip_network(f"10.{rng.randint(199, 254)}.{rng.randint(0, 255)}.{4 * rng.randint(0, 63)}/30")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free private /30 subnet found")


@dataclass
class Veth:
    host_dev: str
    ns_dev: str
    host_ip: str
    ns_ip: str

    def down(self) -> None:
        """Cut the link (the namespace end loses carrier too)."""
        _ip("link", "set", self.host_dev, "down")

    def up(self) -> None:
        _ip("link", "set", self.host_dev, "up")


@dataclass
class Netns:
    """One namespace (loopback up) with any number of veth links to the host."""

    name: str = field(default_factory=lambda: f"ftrl{os.getpid()}n{next(_counter)}")
    links: list[Veth] = field(default_factory=list)

    def __post_init__(self) -> None:
        _ip("netns", "add", self.name)
        try:
            self.run("ip", "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    def exec_argv(self, *argv: str) -> list[str]:
        """`argv` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.exec_argv(*argv), capture_output=True, text=True, timeout=20,
                              check=True)

    def add_link(self) -> Veth:
        """A veth pair with a fresh /30: host end .1 here, namespace end .2 inside."""
        i = len(self.links)
        tag = f"{os.getpid() % 100000}{self.name[-2:]}{i}"
        host_dev, ns_dev = f"fh{tag}"[:15], f"fn{tag}"[:15]
        net = free_subnet()
        host_ip, ns_ip = (str(a) for a in list(net.hosts())[:2])
        _ip("link", "add", host_dev, "type", "veth", "peer", "name", ns_dev)
        link = Veth(host_dev, ns_dev, host_ip, ns_ip)
        self.links.append(link)
        _ip("link", "set", ns_dev, "netns", self.name)
        _ip("addr", "add", f"{host_ip}/30", "dev", host_dev)
        _ip("link", "set", host_dev, "up")
        self.run("ip", "addr", "add", f"{ns_ip}/30", "dev", ns_dev)
        self.run("ip", "link", "set", ns_dev, "up")
        return link

    def pids(self) -> list[int]:
        out = _ip("netns", "pids", self.name, check=False).stdout.split()
        return [int(p) for p in out if p.isdigit()]

    def close(self) -> None:
        """Kill what still runs inside, delete the namespace and the veth pairs."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = self.pids()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, sig)
            deadline = time.monotonic() + 5
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.05)
        _ip("netns", "del", self.name, check=False)
        for link in self.links:
            _ip("link", "del", link.host_dev, check=False)

    def __enter__(self) -> Netns:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
