"""Sample channels, driver side: one per runner incarnation, opened and closed for slots.

Samples travel on each runner's sample channel (`ftrl.rl.sampling.sample_plane`: one
persistent TCP connection per runner incarnation, authenticated with the cluster token;
two thread wake-ups per call instead of the RPC path's ~10), opened on the first sample
of an incarnation (its address is asked with `sample_address` over RPC, so a restarted
runner always gets a new channel). Runners without one (in-process clients, TLS
clusters, other actor classes, a failed connect) are sampled by RPC.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from ftrl.rl.actor_group import describe_error
from ftrl.wire.errors import FtrlError

log = logging.getLogger(__name__)


class ChannelSlot(Protocol):
    """The channel fields of a runner slot (`RunnerSlot`)."""

    name: str
    handle: Any
    incarnation: int
    channel: Any  # SampleChannel to `channel_incarnation` (None: not open)
    channel_incarnation: int  # the incarnation the channel (or its failure) is for


def channel_token(client: Any) -> str | None:
    """The cluster token the sample channels authenticate with, or None where the driver
    samples by RPC only: in-process clients, TLS clusters (the channel is plain TCP)."""
    security = getattr(getattr(client, "_aio", None), "security", None)
    if security is None or security.tls:
        return None
    return security.token or ""


def open_channel(token: str | None, name: str, handle: Any, connect_timeout_s: float) -> Any:
    """A new sample channel to the incarnation `handle` is pinned to (None: no token, the
    runner has none, or it cannot be reached: sampled by RPC). Any thread."""
    if token is None:
        return None
    try:
        info = handle.call("sample_address")
        address = str(info.get("address", "")) if isinstance(info, dict) else ""
        if not address:
            return None
        from ftrl.rl.sampling.sample_plane import SampleChannel

        return SampleChannel(address, token, int(info.get("incarnation", 0)),
                             connect_timeout_s=min(5.0, connect_timeout_s))
    except (FtrlError, OSError) as e:
        log.info("%s has no sample channel (%s): sampling by RPC", name, describe_error(e))
        return None


def slot_channel(slot: ChannelSlot, token: str | None, probe_timeout_s: float) -> Any:
    """The open sample channel to `slot`'s current incarnation, opened on first use;
    None when it has none (asked once per incarnation; a closed one is reopened)."""
    if token is None:
        return None
    if slot.channel is not None and slot.channel_incarnation == slot.incarnation and not slot.channel.closed:
        return slot.channel
    if slot.channel is None and slot.channel_incarnation == slot.incarnation:
        return None  # this incarnation has no channel: RPC only
    close_channel(slot)
    slot.channel_incarnation = slot.incarnation
    slot.channel = open_channel(token, slot.name, slot.handle.options(timeout=probe_timeout_s), probe_timeout_s)
    return slot.channel


def adopt_channel(slot: ChannelSlot, channel: Any, incarnation: int) -> None:
    """Take the sample channel a recovery opened for the incarnation it brought back."""
    if channel is not None:
        close_channel(slot)
        slot.channel, slot.channel_incarnation = channel, incarnation


def close_channel(slot: ChannelSlot, forget: bool = False) -> None:
    """Close `slot`'s sample channel; `forget`: ask for its address again next time."""
    if slot.channel is not None:
        slot.channel.close()
        slot.channel = None
    if forget:
        slot.channel_incarnation = -1
