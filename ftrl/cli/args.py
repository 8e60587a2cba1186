"""Argument pieces every `ftrl` subcommand shares: security and verbosity options, and
argparse types that say what they expect."""

from __future__ import annotations

import argparse


def add_security(p: argparse.ArgumentParser, server: bool = False) -> None:
    g = p.add_argument_group("security")
    g.add_argument("--token-file", help="file holding the cluster token (or set FTRL_TOKEN)")
    g.add_argument("--tls-cert", help="PEM certificate of this process (TLS)")
    g.add_argument("--tls-key", help="PEM private key of this process (TLS)")
    g.add_argument("--tls-ca", help="PEM CA of peers (servers: require client certs = mTLS)")
    g.add_argument("--tls-server-name", help="name to verify in the server certificate")
    if server:
        g.add_argument("--insecure", action="store_true",
                       help="allow listening on a non-loopback address without a token")
        g.add_argument("--tls-no-client-auth", action="store_true",
                       help="TLS without client certificates: --tls-ca only verifies servers")


def add_verbose(p: argparse.ArgumentParser) -> None:
    """`-v` after the subcommand too (`ftrl worker -v`), same as `ftrl -v worker`."""
    p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                   help="log at DEBUG")


def security(args: argparse.Namespace):
    from ftrl.wire.security import security_from_args

    return security_from_args(args)


def positive(kind):
    """An argparse type: a `kind` number > 0."""

    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    parse.__name__ = f"positive {kind.__name__}"  # argparse: "invalid positive int value: 'x'"
    return parse


def non_negative_int(text: str) -> int:
    """An argparse type: an int >= 0 (argparse: "invalid non_negative_int value: 'x'")."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def resources(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"resource {item!r} is not KEY=AMOUNT")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"resource amount {value!r} is not a number") from None
    return out


def count(text: str) -> int:
    from ftrl.client.jobs import MAX_SCALE

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if not 0 <= value <= MAX_SCALE:
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_SCALE}, got {text}")
    return value
