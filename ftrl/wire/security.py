"""Cluster token auth, TLS/mTLS credentials and the rule for binding addresses.

Every ftrl server (the coordinator and every actor) checks the cluster token in
the `authorization` metadata (`Bearer <token>`), compared in constant time. The
only unauthenticated method is the standard health check.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import secrets
import socket
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
from grpc import aio

from ftrl.wire.errors import ConfigError

log = logging.getLogger(__name__)

AUTH_HEADER = "authorization"
CALLER_HEADER = "ftrl-caller"


@dataclass(frozen=True)
class Security:
    """How a process authenticates to and serves the cluster.

    token:     the shared cluster token, or None for no token auth.
    tls_cert/tls_key: PEM files of this process's certificate and key.
    tls_ca:    PEM file of the CA that signs peers; on a server it turns on mTLS
               (client certificates required, unless tls_client_auth is False), on a
               client it verifies the server.
    tls_server_name: name to check in the server certificate, if not the host dialed.
    insecure:  allow serving a non-loopback address without a token.
    tls_client_auth: servers with a CA require client certificates (mTLS).
    """

    token: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    tls_server_name: str | None = None
    insecure: bool = False
    tls_client_auth: bool = True

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert or self.tls_ca)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """Metadata every outgoing call carries."""
        return ((AUTH_HEADER, f"Bearer {self.token}"),) if self.token else ()

    def with_token(self, token: str | None) -> Security:
        return replace(self, token=token)

    def to_env(self) -> dict[str, str]:
        """Settings for a child process (the token never goes on a command line)."""
        env = {}
        if self.token:
            env["FTRL_TOKEN"] = self.token
        for key, value in (
            ("FTRL_TLS_CERT", self.tls_cert),
            ("FTRL_TLS_KEY", self.tls_key),
            ("FTRL_TLS_CA", self.tls_ca),
            ("FTRL_TLS_SERVER_NAME", self.tls_server_name),
        ):
            if value:
                env[key] = value
        if self.insecure:
            env["FTRL_INSECURE"] = "1"
        if not self.tls_client_auth:
            env["FTRL_TLS_NO_CLIENT_AUTH"] = "1"
        return env

    @classmethod
    def from_env(cls) -> Security:
        return cls.from_options(
            token_file=os.environ.get("FTRL_TOKEN_FILE"),
            tls_cert=os.environ.get("FTRL_TLS_CERT"),
            tls_key=os.environ.get("FTRL_TLS_KEY"),
            tls_ca=os.environ.get("FTRL_TLS_CA"),
            tls_server_name=os.environ.get("FTRL_TLS_SERVER_NAME"),
            insecure=os.environ.get("FTRL_INSECURE") == "1",
            tls_client_auth=os.environ.get("FTRL_TLS_NO_CLIENT_AUTH") != "1",
        )

    @classmethod
    def from_options(
        cls,
        token: str | None = None,
        token_file: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        tls_ca: str | None = None,
        tls_server_name: str | None = None,
        insecure: bool = False,
        tls_client_auth: bool = True,
    ) -> Security:
        """Build from CLI-style options; the token comes from `token`, the file, or FTRL_TOKEN."""
        if token is None and token_file:
            token = read_token_file(token_file)
        if token is None:
            token = os.environ.get("FTRL_TOKEN") or None
        if token is None and os.environ.get("FTRL_TOKEN_FILE") and not token_file:
            token = read_token_file(os.environ["FTRL_TOKEN_FILE"])
        for what, path in (("--tls-cert", tls_cert), ("--tls-key", tls_key), ("--tls-ca", tls_ca)):
            if path and not Path(path).is_file():
                raise ConfigError(f"{what} file {path!r} does not exist")
        if bool(tls_cert) != bool(tls_key):
            raise ConfigError("--tls-cert and --tls-key must be given together")
        return cls(token, tls_cert, tls_key, tls_ca, tls_server_name, insecure, tls_client_auth)

    # ---------------------------------------------------------------- credentials

    def server_credentials(self) -> grpc.ServerCredentials | None:
        if not self.tls_cert:
            if self.tls_ca:
                raise ConfigError("a server needs --tls-cert and --tls-key to use TLS")
            return None
        pair = (Path(self.tls_key).read_bytes(), Path(self.tls_cert).read_bytes())  # type: ignore[arg-type]
        ca = Path(self.tls_ca).read_bytes() if self.tls_ca else None
        return grpc.ssl_server_credentials(
            [pair], root_certificates=ca if self.tls_client_auth else None,
            require_client_auth=ca is not None and self.tls_client_auth)

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        if not self.tls:
            return None
        ca = Path(self.tls_ca).read_bytes() if self.tls_ca else None
        key = Path(self.tls_key).read_bytes() if self.tls_key else None
        cert = Path(self.tls_cert).read_bytes() if self.tls_cert else None
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)



def read_token_file(path: str) -> str:
    """Read a token file; it must exist, be non-empty and not be readable by others."""
    p = Path(path)
    try:
        text = p.read_text().strip()
    except OSError as e:
        raise ConfigError(f"cannot read token file {path!r}: {e.strerror}") from e
    if not text:
        raise ConfigError(f"token file {path!r} is empty")
    if p.stat().st_mode & 0o077:
        log.warning("token file %s is readable by group/others; chmod 600 it", path)
    return text


def write_token_file(path: str | Path, token: str | None = None) -> str:
    """Create a 0600 token file with a fresh random token (or `token`); returns it."""
    token = token or secrets.token_urlsafe(32)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, token.encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, p)
    return token


def local_token_path(port: int) -> Path:
    """Where a coordinator on loopback:`port` without a configured token keeps the token
    it made: readable by this user only, found there by this user's workers and clients."""
    home = Path(os.environ.get("FTRL_HOME") or Path.home() / ".ftrl")
    return home / "tokens" / f"loopback-{port}.token"


def discover_token(address: str) -> str | None:
    """The token of a coordinator on this machine's loopback at `address`, if it left one."""
    host, _, port = address.rpartition(":")
    if not port.isdigit() or not is_loopback(host.strip("[]")):
        return None
    path = local_token_path(int(port))
    try:
        return read_token_file(str(path)) if path.is_file() else None
    except ConfigError:
        return None


def ensure_local_token(port: int) -> tuple[str, Path]:
    """The token file of a loopback coordinator: reused if it exists (so a restarted
    coordinator keeps its workers), made (0600) otherwise."""
    path = local_token_path(port)
    if path.is_file():
        try:
            return read_token_file(str(path)), path
        except ConfigError:
            pass
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return write_token_file(path), path


def is_loopback(host: str) -> bool:
    """True if `host` names only the loopback interface."""
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        try:
            return all(ipaddress.ip_address(a[4][0]).is_loopback for a in socket.getaddrinfo(host, None))
        except OSError:
            return False


def check_bind(host: str, security: Security, what: str) -> None:
    """Refuse to serve a non-loopback address without a token unless `insecure`."""
    if security.token or is_loopback(host):
        return
    if not security.insecure:
        raise ConfigError(
            f"{what} would listen on {host or '0.0.0.0'} without a cluster token: give "
            "--token-file (or FTRL_TOKEN), or --insecure to accept that anyone who can "
            "reach this port can start processes"
        )
    log.warning(
        "INSECURE: %s listens on %s with no cluster token; anyone who can reach it can "
        "start arbitrary processes on this cluster",
        what,
        host or "0.0.0.0",
    )


def bind(server: aio.Server, address: str, security: Security) -> int:
    """Add a (TLS if configured) port to `server`; returns the bound port."""
    creds = security.server_credentials()
    try:
        port = server.add_secure_port(address, creds) if creds else server.add_insecure_port(address)
    except RuntimeError:  # grpcio >= 1.60 raises where older versions returned 0
        port = 0
    if port == 0:
        raise ConfigError(f"cannot listen on {address}: address in use or not available")
    return port


def secure_channel(target: str, security: Security, options: Iterable[tuple[str, object]]) -> aio.Channel:
    """An aio channel to `target` with TLS if configured."""
    opts = list(options)
    creds = security.channel_credentials()
    if creds is None:
        return aio.insecure_channel(target, options=opts)
    if security.tls_server_name:
        opts.append(("grpc.ssl_target_name_override", security.tls_server_name))
    return aio.secure_channel(target, creds, options=opts)


class TokenCheck:
    """Compares the `authorization` metadata of a call with `Bearer <token>` in
    constant time (see ftrl.wire.strict, which applies it to every method)."""

    def __init__(self, token: str):
        self._expected = f"Bearer {token}".encode()

    def refusal(self, metadata) -> str | None:
        """None if the call carries the token, else why it is refused."""
        got = ""
        for key, value in metadata or ():
            if key == AUTH_HEADER:
                got = value if isinstance(value, str) else ""
                break
        if hmac.compare_digest(got.encode(), self._expected):
            return None
        reason = "missing cluster token" if not got else "wrong cluster token"
        return f"{reason}: pass the cluster token (--token-file or FTRL_TOKEN)"


def security_from_args(args: object) -> Security:
    """The Security of a command's flags (`--token-file`, `--tls-*`, `--insecure`,
    `--tls-no-client-auth`, each absent flag read from its FTRL_ environment variable)."""
    env = os.environ.get

    def flag(name: str):
        return getattr(args, name, None)

    return Security.from_options(
        token_file=flag("token_file"),
        tls_cert=flag("tls_cert") or env("FTRL_TLS_CERT"),
        tls_key=flag("tls_key") or env("FTRL_TLS_KEY"),
        tls_ca=flag("tls_ca") or env("FTRL_TLS_CA"),
        tls_server_name=flag("tls_server_name") or env("FTRL_TLS_SERVER_NAME"),
        insecure=bool(flag("insecure")) or env("FTRL_INSECURE") == "1",
        tls_client_auth=not (flag("tls_no_client_auth") or env("FTRL_TLS_NO_CLIENT_AUTH") == "1"),
    )
