"""Learner mesh rendezvous: who is in which mesh epoch, with which rank. No torch here.

A *mesh* is one learner group (`JOB/learner`). Members join with the address of the
TCPStore they serve; the coordinator answers with views: (epoch, members in rank
order, waiting joiners, the epoch's store prefix). Rules, in one place:

- A member's death (its actor record leaves ALIVE/STARTING at that incarnation, or
  it is replaced) opens the next epoch at once with the survivors, in their old
  order, plus every warmed-up joiner. Survivors watching the mesh see it at once
  and abandon the old epoch's collectives: nobody waits out a collective timeout.
- Joiners wait until the group's owner (the driver) forms the next epoch at a step
  boundary (`form`). `form` is compare-and-set on the epoch, so two owners (an old
  driver and its restart) cannot both open one.
- Rank 0 is the first survivor when there is one: it holds the trained state and
  serves the epoch's store (`STORE_PREFIX`: a fresh key space per epoch, so a
  member left behind in an old epoch can never enter a newer world).
- The first joiner pins the mesh's config hash (model shape and config); a joiner
  with another hash is refused with a clear error.
- Epochs only grow, also across a coordinator restart: joiners say the newest
  epoch they saw and the next epoch starts above it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ftrl.coordinator.records import ActorRecord, ActorState
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
)
from ftrl.wire.limits import check_name

log = logging.getLogger(__name__)

MAX_MESHES = 10_000
MAX_MEMBERS = 4096
MAX_ADDRESS = 256
MAX_HASH = 128
MAX_EPOCH = 1 << 53
#: States in which an incarnation may be a member (RESTARTING: a restarted copy's
#: constructor, which is where a learner joins, runs before it is reported ALIVE).
_LIVE = (ActorState.ALIVE, ActorState.STARTING, ActorState.RESTARTING)


def store_prefix(group: str, epoch: int) -> str:
    """The key prefix of one epoch in rank 0's store."""
    return f"{group}/epoch/{epoch}/"


@dataclass
class Member:
    name: str
    incarnation: int
    store_address: str
    host: str

    def to_proto(self, rank: int) -> pb.MeshMember:
        return pb.MeshMember(name=self.name, incarnation=self.incarnation,
                             store_address=self.store_address, host=self.host, rank=rank)


@dataclass
class Mesh:
    group: str
    epoch: int = 0
    floor: int = 0  # the newest epoch any joiner saw (next epoch starts above it)
    members: list[Member] = field(default_factory=list)
    waiting: dict[str, Member] = field(default_factory=dict)
    config_hash: str = ""
    reason: str = ""
    seq: int = 0
    formed_at: float = 0.0

    def to_proto(self) -> pb.MeshView:
        return pb.MeshView(
            group=self.group,
            epoch=self.epoch,
            members=[m.to_proto(i) for i, m in enumerate(self.members)],
            waiting=[m.to_proto(-1) for m in self.waiting.values()],
            store_prefix=store_prefix(self.group, self.epoch) if self.epoch else "",
            config_hash=self.config_hash,
            reason=self.reason,
            seq=self.seq,
            formed_at=self.formed_at,
        )

    def member(self, name: str) -> Member | None:
        for m in self.members:
            if m.name == name:
                return m
        return None


class MeshRegistry:
    """Every learner mesh of the cluster. Runs on the coordinator's loop thread."""

    def __init__(self, actor: Callable[[str], ActorRecord | None],
                 on_change: Callable[[str], None] = lambda group: None) -> None:
        self._actor = actor
        self.on_change = on_change
        self.meshes: dict[str, Mesh] = {}

    # ------------------------------------------------------------------ helpers

    def _changed(self, mesh: Mesh) -> None:
        mesh.seq += 1
        self.on_change(mesh.group)

    def _open_epoch(self, mesh: Mesh, members: list[Member], reason: str) -> None:
        mesh.epoch = max(mesh.epoch, mesh.floor) + 1
        mesh.members = members
        mesh.waiting = {}
        mesh.reason = reason
        mesh.formed_at = time.time()
        log.info("mesh %s: epoch %d with %d members (%s)", mesh.group, mesh.epoch, len(members), reason)

    def _mesh_of(self, name: str) -> Mesh | None:
        """The mesh `name` may belong to: members of GROUP are named GROUP/I."""
        return self.meshes.get(name.rpartition("/")[0])

    def _remove(self, mesh: Mesh, name: str, why: str) -> None:
        """`name` leaves: a waiting joiner just goes; a member's exit opens the next epoch."""
        if mesh.waiting.pop(name, None) is not None:
            self._changed(mesh)
        elif mesh.member(name) is not None:
            self._drop_members(mesh, {name}, why)

    def get(self, group: str) -> Mesh:
        check_name(group, "mesh group")
        mesh = self.meshes.get(group)
        if mesh is None:
            raise NotFoundError(f"no learner mesh named {group!r}")
        return mesh

    def view(self, group: str) -> pb.MeshView:
        """The group's view; an unknown group reads as an empty, unformed mesh."""
        check_name(group, "mesh group")
        mesh = self.meshes.get(group)
        return mesh.to_proto() if mesh is not None else pb.MeshView(group=group)

    # ------------------------------------------------------------------ API

    def join(self, req: pb.JoinMeshRequest) -> pb.MeshView:
        """A warmed-up member asks to be taken into the next epoch."""
        check_name(req.group, "mesh group")
        check_name(req.member, "mesh member")
        if req.member.rpartition("/")[0] != req.group:
            raise InvalidArgumentError(f"member {req.member!r} is not in group {req.group!r} (names are GROUP/I)")
        for what, value in (("store_address", req.store_address), ("host", req.host)):
            if not value or len(value) > MAX_ADDRESS:
                raise InvalidArgumentError(f"{what} must be 1..{MAX_ADDRESS} characters")
        if len(req.config_hash) > MAX_HASH:
            raise InvalidArgumentError(f"config_hash is longer than {MAX_HASH} characters")
        if not 0 <= req.last_epoch < MAX_EPOCH:
            raise InvalidArgumentError("last_epoch is out of range")
        rec = self._actor(req.member)
        if rec is None:
            raise NotFoundError(f"{req.member} is not an actor of this cluster")
        if req.incarnation != rec.incarnation or rec.state not in _LIVE:
            raise PermissionDeniedError(
                f"{req.member}@{req.incarnation} is fenced: the actor is incarnation "
                f"{rec.incarnation} ({rec.state.value})")
        mesh = self.meshes.get(req.group)
        if mesh is None:
            if len(self.meshes) >= MAX_MESHES:
                self._drop_empty()
            if len(self.meshes) >= MAX_MESHES:
                raise ResourceExhaustedError(f"the cluster holds {MAX_MESHES} learner meshes")
            # seq starts at the wall clock (ms), so a watcher's after_seq from before a
            # coordinator restart is never ahead of the new mesh
            mesh = self.meshes[req.group] = Mesh(group=req.group, config_hash=req.config_hash,
                                                 seq=int(time.time() * 1000))
        if not mesh.members and not mesh.waiting:
            mesh.config_hash = req.config_hash  # an empty mesh takes the newcomer's config
        elif req.config_hash != mesh.config_hash:
            raise InvalidArgumentError(
                f"{req.member} was refused: its config hash {req.config_hash[:16]} differs from "
                f"the mesh's {mesh.config_hash[:16]} (another model shape or learner config)")
        mesh.floor = max(mesh.floor, int(req.last_epoch))
        current = mesh.member(req.member)
        if current is not None and current.incarnation == req.incarnation:
            return mesh.to_proto()  # already a member of this epoch
        if len(mesh.members) + len(mesh.waiting) >= MAX_MEMBERS and req.member not in mesh.waiting:
            raise ResourceExhaustedError(f"mesh {req.group} has {MAX_MEMBERS} members")
        member = Member(req.member, req.incarnation, req.store_address, req.host)
        if current is not None:
            # an older copy of it is still a member: that copy is gone
            self._drop_members(mesh, {req.member}, f"{req.member} came back as incarnation {req.incarnation}")
        mesh.waiting[req.member] = member
        self._changed(mesh)
        return mesh.to_proto()

    def form(self, req: pb.FormMeshRequest) -> pb.MeshView:
        """Open the next epoch from `expected_epoch`: survivors minus `remove`, plus the
        waiting joiners, if that makes at least `min_size` (removals always apply).
        Without joiners or removals nothing changes, unless `reform` (an epoch whose
        store keys were used by a failed attempt is never entered twice)."""
        mesh = self.get(req.group)
        if req.expected_epoch != mesh.epoch:
            return mesh.to_proto()  # someone else formed it already: read and decide again
        remove = set(req.remove)
        dropped_waiting = [name for name in remove if mesh.waiting.pop(name, None) is not None]
        removed = {m.name for m in mesh.members if m.name in remove}
        reason = req.reason[:200] or "formed"
        members = mesh.members + list(mesh.waiting.values())
        if removed:
            self._drop_members(mesh, removed, reason)
        elif (mesh.waiting or mesh.epoch == 0 or req.reform) and len(members) >= max(1, req.min_size):
            self._open_epoch(mesh, members, reason)
            self._changed(mesh)
        elif dropped_waiting:
            self._changed(mesh)
        return mesh.to_proto()

    def leave(self, group: str, member: str, reason: str = "") -> pb.MeshView:
        """Take a member out (planned removal, or its owner found it hung)."""
        mesh = self.get(group)
        check_name(member, "mesh member")
        self._remove(mesh, member, reason[:200] or f"{member} left")
        return mesh.to_proto()

    def actor_died(self, name: str, incarnation: int, message: str = "") -> None:
        """Controller hook: incarnation `incarnation` of `name` died (its worker saw the
        exit, or its node was lost): a member leaves at once."""
        mesh = self._mesh_of(name)
        member = mesh and (mesh.member(name) or mesh.waiting.get(name))
        if member is None or member.incarnation != incarnation:
            return
        self._remove(mesh, name, f"{name}@{incarnation} died" + (f": {message.splitlines()[0][:120]}" if message else ""))

    def actor_changed(self, name: str) -> None:
        """Controller hook: a member whose actor died or was replaced leaves at once."""
        mesh = self._mesh_of(name)
        member = mesh and (mesh.member(name) or mesh.waiting.get(name))
        if member is None:
            return
        rec = self._actor(name)
        if rec is not None and rec.incarnation == member.incarnation and rec.state in _LIVE:
            return
        state = rec.state.value if rec is not None else "forgotten"
        self._remove(mesh, name, f"{name}@{member.incarnation} {'died' if state != 'DEAD' else 'is DEAD'} ({state})")

    def _drop_members(self, mesh: Mesh, names: set[str], reason: str) -> None:
        survivors = [m for m in mesh.members if m.name not in names]
        self._open_epoch(mesh, survivors + list(mesh.waiting.values()), reason)
        self._changed(mesh)

    def _drop_empty(self) -> None:
        for group in [g for g, m in self.meshes.items() if not m.members and not m.waiting]:
            del self.meshes[group]

    def views(self) -> list[pb.MeshView]:
        return [self.meshes[g].to_proto() for g in sorted(self.meshes)]
