"""The weights plane over real loopback sockets: token check, cut-through relay, a broken
upstream, buffer reuse."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from ftrl.rl.weights.plane import WeightsNode, WeightsPlaneError, fetch


def test_pull_and_relay_cut_through():
    root, mid, leaf = WeightsNode("127.0.0.1", "tok"), WeightsNode("127.0.0.1", "tok"), WeightsNode("127.0.0.1", "tok")
    weights = np.random.default_rng(0).random(3_000_000, dtype=np.float32)
    try:
        root.store.publish(7, weights)
        got: dict[str, np.ndarray] = {}
        # the leaf asks the middle node before it has anything: it waits, then gets the
        # bytes while they arrive
        t = threading.Thread(target=lambda: got.setdefault(
            "leaf", fetch(mid.address, "tok", 7, leaf.store, weights.nbytes, 20)))
        t.start()
        got["mid"] = fetch(root.address, "tok", 7, mid.store, weights.nbytes, 20)
        t.join(20)
        assert np.array_equal(got["mid"], weights) and np.array_equal(got["leaf"], weights)
    finally:
        for node in (root, mid, leaf):
            node.close()


def test_a_relay_forwards_bytes_before_it_has_them_all():
    """Cut-through for real: the middle node holds only the first half (its upstream is
    slow); the leaf already has that half, and gets the rest once it arrives."""
    mid, leaf = WeightsNode("127.0.0.1", None), WeightsNode("127.0.0.1", None)
    weights = np.random.default_rng(1).random(2 << 20, dtype=np.float32)
    half = weights.nbytes // 2
    try:
        entry = mid.store.receiving(3, weights.nbytes)
        entry.buffer[: weights.size // 2] = weights[: weights.size // 2]
        mid.store.progress(entry, half)
        got: dict[str, np.ndarray] = {}
        t = threading.Thread(target=lambda: got.setdefault(
            "leaf", fetch(mid.address, None, 3, leaf.store, weights.nbytes, 20)))
        t.start()
        leaf_entry = leaf.store.wait_entry(3, time.monotonic() + 10)
        assert leaf_entry is not None
        assert leaf.store.wait_filled(leaf_entry, half - 1, time.monotonic() + 10) >= half
        assert not got  # the leaf is still waiting for the second half
        entry.buffer[weights.size // 2:] = weights[weights.size // 2:]
        mid.store.progress(entry, weights.nbytes)
        t.join(10)
        assert np.array_equal(got["leaf"], weights)
    finally:
        mid.close()
        leaf.close()


def test_a_reused_version_never_reaches_a_child_as_old_bytes():
    """After a restore the weights version repeats; blobs are keyed by the publisher's
    fresh key, so a relay that still holds the old blob makes the child wait for the new
    one instead of serving the old bytes."""
    root, mid, leaf = WeightsNode("127.0.0.1", None), WeightsNode("127.0.0.1", None), WeightsNode("127.0.0.1", None)
    old, new = np.zeros(1 << 18, np.float32), np.ones(1 << 18, np.float32)
    try:
        old_key = WeightsNode.new_key()
        root.store.publish(old_key, old)
        fetch(root.address, None, old_key, mid.store, old.nbytes, 10)  # the relay holds "version 3" once
        new_key = WeightsNode.new_key()  # "version 3" again, after a restore
        assert new_key > old_key
        root.store.publish(new_key, new)
        got: dict[str, np.ndarray] = {}
        t = threading.Thread(target=lambda: got.setdefault(
            "leaf", fetch(mid.address, None, new_key, leaf.store, new.nbytes, 20)))
        t.start()  # asks before the relay has started pulling the new blob
        fetch(root.address, None, new_key, mid.store, new.nbytes, 10)
        t.join(20)
        assert np.array_equal(got["leaf"], new)
    finally:
        for node in (root, mid, leaf):
            node.close()


def test_closing_a_node_ends_the_transfers_waiting_on_it():
    mid, leaf = WeightsNode("127.0.0.1", None), WeightsNode("127.0.0.1", None)
    try:
        mid.store.receiving(9, 4096)  # never filled
        errors: list[BaseException] = []

        def pull() -> None:
            try:
                fetch(mid.address, None, 9, leaf.store, 4096, 60)
            except WeightsPlaneError as e:
                errors.append(e)

        t = threading.Thread(target=pull)
        t.start()
        assert leaf.store.wait_entry(9, time.monotonic() + 10) is not None  # the transfer began
        t0 = time.monotonic()
        mid.close()
        t.join(30)
        assert not t.is_alive() and errors and time.monotonic() - t0 < 30
    finally:
        leaf.close()


def test_wrong_token_wrong_size_and_unknown_version_are_refused():
    node, other = WeightsNode("127.0.0.1", "right"), WeightsNode("127.0.0.1", "right")
    try:
        node.store.publish(1, np.ones(1024, np.float32))
        with pytest.raises(WeightsPlaneError, match="wrong cluster token"):
            fetch(node.address, "wrong", 1, other.store, 4096, 5)
        with pytest.raises(WeightsPlaneError, match="expected 1 of 8"):
            fetch(node.address, "right", 1, other.store, 8, 5)
        node.store.publish(2, np.ones(1024, np.float32))
        node.store.publish(3, np.ones(1024, np.float32))
        with pytest.raises(WeightsPlaneError, match="does not have"):
            fetch(node.address, "right", 1, other.store, 4096, 5)  # evicted
        with pytest.raises(WeightsPlaneError, match="bad weights size"):
            fetch(node.address, "right", 3, other.store, 4095, 5)
    finally:
        node.close()
        other.close()


def test_a_broken_upstream_fails_the_downstream_transfer_fast():
    mid, leaf = WeightsNode("127.0.0.1", None), WeightsNode("127.0.0.1", None)
    try:
        entry = mid.store.receiving(5, 4 << 20)
        mid.store.progress(entry, 1 << 20)  # a quarter arrived, then the upstream broke
        threading.Timer(0.2, lambda: mid.store.progress(entry, 1 << 20, failed=True)).start()
        t0 = time.monotonic()
        with pytest.raises(WeightsPlaneError, match="closed the transfer"):
            fetch(mid.address, None, 5, leaf.store, 4 << 20, 20)
        assert time.monotonic() - t0 < 5
    finally:
        mid.close()
        leaf.close()


def test_buffers_of_evicted_versions_are_reused():
    node = WeightsNode("127.0.0.1", None)
    buffers = []
    for version in range(1, 6):
        entry = node.store.receiving(version, 4096)
        node.store.progress(entry, 4096)
        buffers.append(entry.buffer)
    assert any(b is buffers[0] for b in buffers[1:])  # recycled, not allocated again
    node.close()


def test_mixed_sizes_reuse_and_a_failed_parent_fails_its_children_at_once():
    root, mid, leaf = WeightsNode("127.0.0.1", None), WeightsNode("127.0.0.1", None), WeightsNode("127.0.0.1", None)
    try:
        for version, n in enumerate((1024, 1024, 1024, 4096, 4096, 4096), start=1):
            root.store.publish(version, np.full(n, version, np.float32))
            got = fetch(root.address, None, version, mid.store, 4 * n, 10)
            assert got.size == n and got[0] == version
        # the middle node's own pull fails (it expects another size): its child hears at once
        root.store.publish(7, np.ones(4096, np.float32))
        def failing_pull() -> None:
            with pytest.raises(WeightsPlaneError):
                fetch(root.address, None, 7, mid.store, 8, 10)

        t = threading.Thread(target=failing_pull)
        t0 = time.monotonic()
        t.start()
        with pytest.raises(WeightsPlaneError, match="does not have"):
            fetch(mid.address, None, 7, leaf.store, 4 * 4096, 30)
        t.join(10)
        assert time.monotonic() - t0 < 5
    finally:
        for node in (root, mid, leaf):
            node.close()
