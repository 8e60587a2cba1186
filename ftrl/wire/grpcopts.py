"""gRPC channel and server options with explicit message size caps."""

from __future__ import annotations


def channel_options(max_message: int) -> list[tuple[str, object]]:
    """Options for a client channel whose messages are capped at `max_message` bytes."""
    return [
        ("grpc.max_receive_message_length", max_message),
        ("grpc.max_send_message_length", max_message),
        ("grpc.enable_retries", 0),
        ("grpc.keepalive_time_ms", 10_000),
        ("grpc.keepalive_timeout_ms", 5_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.initial_reconnect_backoff_ms", 100),
        # gRPC also uses this as the deadline of one connection attempt: 100 ms
        # failed handshakes (TLS especially) on a loaded 2-core machine.
        ("grpc.min_reconnect_backoff_ms", 1_000),
        # A channel whose peer is down tries to connect again within 0.5 s (+-20%): a
        # restarted coordinator hears from every process soon after it listens (a job's
        # status is fresh < 1 s after, benchmarks/status_freshness.py: 1 s gave up to
        # 1.1 s). The cost: ~2 connection attempts a second per channel while the peer
        # refuses them, instead of ~1 (one that hangs is bounded by the 1 s above).
        ("grpc.max_reconnect_backoff_ms", 500),
    ]


def server_options(max_message: int) -> list[tuple[str, object]]:
    """Options for a server whose incoming messages are capped at `max_message` bytes."""
    return [
        ("grpc.max_receive_message_length", max_message),
        ("grpc.max_send_message_length", max_message),
        # never share a port with another process (two coordinators on one port)
        ("grpc.so_reuseport", 0),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
        ("grpc.http2.max_ping_strikes", 0),
        # grpc core cancels calls once 1000 are waiting for the application (3000
        # hard); a coordinator with thousands of nodes (re)registering at once
        # needs more room. Still bounded.
        ("grpc.server.max_pending_requests", 20_000),
        ("grpc.server.max_pending_requests_hard_limit", 50_000),
    ]
