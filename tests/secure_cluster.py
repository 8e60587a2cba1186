"""A LocalCluster whose coordinator and workers also run with TLS flags.

    pki = make_pki(tmp)
    cluster = SecureCluster.mtls(pki, workers=1, slots=2, env=...)

The processes get `--tls-cert/--tls-key[/--tls-ca]`; clients made by
`cluster.client()` (and the cluster's own readiness checks) use `client_security`
plus the cluster token.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ftrl.client.cluster import LocalCluster
from ftrl.wire.security import Security
from tests.pki import Pki


class SecureCluster(LocalCluster):
    def __init__(self, workers: int = 1, slots: int | None = None, *, server_flags: list[str],
                 client_security: Security, **kwargs: Any) -> None:
        super().__init__(workers, slots, **kwargs)
        self.server_flags = list(server_flags)
        self.client_security = client_security

    @classmethod
    def mtls(cls, pki: Pki, workers: int = 1, slots: int | None = None, **kwargs: Any) -> SecureCluster:
        """Every server requires a client certificate signed by the cluster CA."""
        flags = ["--tls-cert", pki.node_cert, "--tls-key", pki.node_key, "--tls-ca", pki.ca]
        client = Security(tls_cert=pki.client_cert, tls_key=pki.client_key, tls_ca=pki.ca)
        return cls(workers, slots, server_flags=flags, client_security=client, **kwargs)

    def _python(self, *args: str) -> list[str]:
        return [*super()._python(*args), *self.server_flags]

    @property
    def security(self) -> Security:
        return replace(self.client_security, token=self.token)
