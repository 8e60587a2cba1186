"""The cluster side of the client: nodes, actors (create, look up, kill) and learner meshes."""

from __future__ import annotations

import os
from typing import Any

from ftrl.client.connection import Connection
from ftrl.client.handle import AsyncActorHandle, wait_actor
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.convert import actor_dict, cluster_dict, mesh_dict, node_dict


class ClusterCalls(Connection):
    """Coordinator calls about nodes, actors and learner meshes (part of `AsyncClient`)."""

    # ---------------------------------------------------------------- cluster

    async def nodes(self) -> list[dict[str, Any]]:
        """Nodes: dicts with node_id, address, state (ALIVE|LOST|EXCLUDED), slots, actors, ..."""
        reply = await self._rpc("ListNodes", pb.ListNodesRequest())
        return [node_dict(n) for n in reply.nodes]

    async def actors(self, prefix: str = "") -> list[dict[str, Any]]:
        """Actors: dicts with name, class_path, node_id, pid, state, restarts, incarnation, ..."""
        reply = await self._rpc("ListActors", pb.ListActorsRequest(prefix=prefix))
        return [actor_dict(a) for a in reply.actors]

    async def actor(self, name: str) -> dict[str, Any]:
        """One actor's record (NotFoundError if there is none)."""
        return actor_dict(await self._rpc("GetActor", pb.GetActorRequest(name=name)))

    async def cluster_info(self) -> dict[str, Any]:
        """The coordinator's own facts: id, version, uptime, heartbeat settings, event seq."""
        return cluster_dict(await self._rpc("GetClusterInfo", pb.ClusterInfoRequest()))

    async def wait_actor(self, name: str, timeout: float = 60.0, min_incarnation: int = 0) -> pb.ActorInfo:
        """Wait until `name` is ALIVE (incarnation >= min_incarnation) or DEAD; returns its info."""
        return await wait_actor(self, name, timeout, min_incarnation)

    async def readmit_node(self, node_id: str) -> dict[str, Any]:
        """Take an EXCLUDED node back (its failure count starts over); returns its record."""
        return node_dict(await self._rpc("ReadmitNode", pb.ReadmitNodeRequest(node_id=node_id)))

    # ---------------------------------------------------------------- actors

    async def create_actor(
        self,
        class_path: str,
        name: str | None = None,
        kwargs: dict[str, Any] | None = None,
        max_restarts: int = -1,
        resources: dict[str, float] | None = None,
        *,
        max_concurrency: int = 1,
        env: dict[str, str] | None = None,
        get_if_exists: bool = False,
        wait: bool = True,
        timeout: float = 120.0,
        placement_strategy: str = "",
    ) -> AsyncActorHandle:
        """Create an actor of `class_path` ("pkg.mod:Class") and, by default, wait until it serves.

        max_restarts: restarts in place after failures (-1 = unlimited, 0 = none).
        resources: e.g. {"cpu": 1, "gpu": 0}; default {"cpu": 1}.
        placement_strategy: "" (the node with most free CPU), "PACK" or "SPREAD" among the
        actors of its role (the names sharing its prefix up to the last '/').
        Raises ActorStartError if the class cannot be imported or its constructor raises.
        """
        name = name or f"{class_path.rpartition(':')[2].lower()}-{os.urandom(4).hex()}"
        spec = pb.ActorSpec(
            name=name,
            class_path=class_path,
            kwargs=codec.check_encodable(kwargs or {}, "actor kwargs"),
            max_restarts=max_restarts,
            resources=resources or {},
            max_concurrency=max_concurrency,
            env=codec.encode(env) if env else b"",
            placement_strategy=placement_strategy,
        )
        info = await self._rpc("CreateActor", pb.CreateActorRequest(spec=spec, get_if_exists=get_if_exists))
        handle = AsyncActorHandle(self, name, info)
        if wait:
            await handle.wait_alive(timeout)
        return handle

    async def get_actor(self, name: str, strict: bool = False) -> AsyncActorHandle:
        """A handle to an existing actor (NotFoundError if there is none)."""
        info = await self._rpc("GetActor", pb.GetActorRequest(name=name))
        return AsyncActorHandle(self, name, info, strict=strict)

    async def kill_actor(self, name: str, reason: str = "") -> dict[str, Any]:
        """Stop an actor for good; returns its final record."""
        reply = await self._rpc("KillActor", pb.KillActorRequest(name=name, reason=reason))
        return actor_dict(reply.actor)

    # ---------------------------------------------------------------- learner mesh

    async def join_mesh(self, group: str, member: str, incarnation: int, store_address: str,
                        host: str, config_hash: str = "", last_epoch: int = 0) -> dict[str, Any]:
        """Ask to be taken into the mesh's next epoch (see coordinator/rendezvous.py)."""
        return mesh_dict(await self._rpc("JoinMesh", pb.JoinMeshRequest(
            group=group, member=member, incarnation=incarnation, store_address=store_address,
            host=host, config_hash=config_hash, last_epoch=last_epoch)))

    async def get_mesh(self, group: str, after_seq: int = -1, wait_s: float = 0.0) -> dict[str, Any]:
        """The mesh's view; with `wait_s`, wait that long for a change past `after_seq`."""
        wait_s = max(0.0, min(wait_s, 60.0))
        return mesh_dict(await self._rpc(
            "GetMesh", pb.GetMeshRequest(group=group, after_seq=after_seq, wait_s=wait_s),
            timeout=wait_s + self.timeout))

    async def form_mesh(self, group: str, expected_epoch: int, min_size: int = 1,
                        remove: list[str] | None = None, reason: str = "",
                        reform: bool = False) -> dict[str, Any]:
        """Open the next epoch from `expected_epoch` (compare-and-set)."""
        return mesh_dict(await self._rpc("FormMesh", pb.FormMeshRequest(
            group=group, expected_epoch=expected_epoch, min_size=min_size,
            remove=list(remove or ()), reason=reason, reform=reform)))

    async def leave_mesh(self, group: str, member: str, reason: str = "") -> dict[str, Any]:
        """Take `member` out of the mesh (a planned removal, or its owner found it hung)."""
        return mesh_dict(await self._rpc(
            "LeaveMesh", pb.LeaveMeshRequest(group=group, member=member, reason=reason)))

    async def meshes(self) -> list[dict[str, Any]]:
        """Every learner mesh of the cluster."""
        reply = await self._rpc("ListMeshes", pb.ListMeshesRequest())
        return [mesh_dict(v) for v in reply.meshes]
