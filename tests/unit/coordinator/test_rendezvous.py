"""Learner mesh rendezvous in the coordinator, without a network (the controller harness)."""

from __future__ import annotations

import pytest

from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.errors import InvalidArgumentError, NotFoundError, PermissionDeniedError
from tests.unit.coordinator.controller_harness import Harness

G = "job/learner"


def _setup(n: int = 3) -> Harness:
    h = Harness()
    h.register("n1", cpu=8)
    for i in range(n):
        h.create(f"{G}/{i}")
        h.started(f"{G}/{i}")
    return h


def _join(h: Harness, i: int, incarnation: int | None = None, config_hash: str = "abc", last_epoch: int = 0):
    name = f"{G}/{i}"
    inc = incarnation if incarnation is not None else h.c.actors[name].incarnation
    return h.c.meshes.join(pb.JoinMeshRequest(
        group=G, member=name, incarnation=inc, store_address=f"127.0.0.1:{7000 + i}",
        host="127.0.0.1", config_hash=config_hash, last_epoch=last_epoch))


def _form(h: Harness, expected: int, min_size: int = 1, remove=(), reform: bool = False):
    return h.c.meshes.form(pb.FormMeshRequest(group=G, expected_epoch=expected, min_size=min_size,
                                              remove=list(remove), reform=reform))


def _names(view) -> list[str]:
    return [m.name for m in view.members]


def test_first_epoch_forms_only_with_n_init_members():
    h = _setup(3)
    _join(h, 0)
    _join(h, 1)
    view = _form(h, 0, min_size=3)
    assert view.epoch == 0 and len(view.waiting) == 2
    _join(h, 2)
    view = _form(h, 0, min_size=3)
    assert view.epoch == 1
    assert _names(view) == [f"{G}/0", f"{G}/1", f"{G}/2"]
    assert [m.rank for m in view.members] == [0, 1, 2]
    assert view.store_prefix == f"{G}/epoch/1/"
    assert not view.waiting


def test_a_death_opens_the_next_epoch_at_once_with_the_survivors_in_order():
    h = _setup(3)
    for i in range(3):
        _join(h, i)
    _form(h, 0, 3)
    seq = h.c.meshes.view(G).seq
    node, inc = "n1", h.c.actors[f"{G}/0"].incarnation
    h.report(node, f"{G}/0", inc, pb.REPORT_EXITED, exit_code=-9, restarting_locally=True,
             next_incarnation=inc + 1)
    view = h.c.meshes.view(G)
    assert view.epoch == 2 and view.seq > seq
    assert _names(view) == [f"{G}/1", f"{G}/2"]  # rank 0 is now the first survivor
    assert "died" in view.reason
    # the restarted copy joins while its constructor runs (RESTARTING), and waits
    _join(h, 0)
    view = h.c.meshes.view(G)
    assert view.epoch == 2 and [m.name for m in view.waiting] == [f"{G}/0"]
    view = _form(h, 2)
    assert view.epoch == 3 and _names(view) == [f"{G}/1", f"{G}/2", f"{G}/0"]


def test_a_stale_incarnation_is_refused():
    h = _setup(1)
    inc = h.c.actors[f"{G}/0"].incarnation
    h.report("n1", f"{G}/0", inc, pb.REPORT_EXITED, exit_code=-9, restarting_locally=True,
             next_incarnation=inc + 1)
    with pytest.raises(PermissionDeniedError, match="fenced"):
        _join(h, 0, incarnation=inc)


def test_another_config_hash_is_refused_with_a_clear_error():
    h = _setup(2)
    _join(h, 0, config_hash="aaaa")
    with pytest.raises(InvalidArgumentError, match="refused: its config hash"):
        _join(h, 1, config_hash="bbbb")


def test_form_is_compare_and_set_and_removal_always_applies():
    h = _setup(3)
    for i in range(3):
        _join(h, i)
    _form(h, 0, 3)
    seq = h.c.meshes.view(G).seq
    assert _form(h, 0, reform=True).epoch == 1  # stale expected epoch: nothing happens
    assert _form(h, 0, remove=[f"{G}/2"]).epoch == 1  # not even a removal
    assert _form(h, 1).epoch == 1  # nothing to change
    assert _form(h, 1, remove=[f"{G}/7"]).epoch == 1  # removing nobody changes nothing
    assert h.c.meshes.view(G).seq == seq  # and wakes no watcher
    view = _form(h, 1, min_size=5, remove=[f"{G}/2"])
    assert view.epoch == 2 and _names(view) == [f"{G}/0", f"{G}/1"]
    view = _form(h, 2, reform=True)
    assert view.epoch == 3 and _names(view) == [f"{G}/0", f"{G}/1"]


def test_leave_and_dead_actor():
    h = _setup(2)
    _join(h, 0)
    _join(h, 1)
    _form(h, 0, 2)
    view = h.c.meshes.leave(G, f"{G}/1", "scaled down")
    assert view.epoch == 2 and _names(view) == [f"{G}/0"]
    h.c.kill_actor(f"{G}/0")
    view = h.c.meshes.view(G)
    assert view.epoch == 3 and _names(view) == []


def test_a_newer_incarnation_seen_without_a_death_event_leaves_at_once():
    """The worker restarted a member in place and reported only the new copy's start:
    the old copy leaves the mesh; the new one joins as a newcomer."""
    h = _setup(2)
    _join(h, 0)
    _join(h, 1)
    _form(h, 0, 2)
    node_id, _ = h.last_start(f"{G}/1")
    h.report(node_id, f"{G}/1", 2, pb.REPORT_STARTED, pid=99, address="127.0.0.1:10002")
    assert h.c.actors[f"{G}/1"].incarnation == 2
    view = h.c.meshes.view(G)
    assert view.epoch == 2 and _names(view) == [f"{G}/0"]
    _join(h, 1)
    view = _form(h, 2)
    assert view.epoch == 3 and [(m.name, m.incarnation) for m in view.members] == [(f"{G}/0", 1), (f"{G}/1", 2)]


def test_epochs_never_go_back_after_a_coordinator_restart():
    h = _setup(1)
    _join(h, 0, last_epoch=41)
    assert _form(h, 0).epoch == 42


def test_bad_input():
    h = _setup(1)
    for group in ("other", "job"):  # a member belongs to exactly one group: its name's parent
        with pytest.raises(InvalidArgumentError, match="not in group"):
            h.c.meshes.join(pb.JoinMeshRequest(group=group, member=f"{G}/0", incarnation=1,
                                               store_address="a:1", host="a"))
    with pytest.raises(InvalidArgumentError, match="store_address"):
        h.c.meshes.join(pb.JoinMeshRequest(group=G, member=f"{G}/0", incarnation=1, host="a"))
    with pytest.raises(NotFoundError):
        h.c.meshes.join(pb.JoinMeshRequest(group=G, member=f"{G}/9", incarnation=1,
                                           store_address="a:1", host="a"))
    with pytest.raises(NotFoundError):
        _form(h, 0)
    assert h.c.meshes.view("nobody/learner").epoch == 0


def test_the_coordinator_never_imports_torch():
    import subprocess
    import sys

    code = ("import sys, ftrl.coordinator.server, ftrl.coordinator.main, ftrl.coordinator.rendezvous; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
