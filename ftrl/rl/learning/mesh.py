"""One learner's place in an elastic mesh: a process group per mesh epoch.

The coordinator says who is in which epoch (ftrl/coordinator/rendezvous.py); this
module turns a view into a torch.distributed process group and runs collectives on
it that can be abandoned at once:

- Every member serves a TCPStore of its own from the start (warm-up); an epoch uses
  rank 0's store under the epoch's own prefix, so a member left in an old epoch can
  never meet a newer world.
- Process groups are built directly (`ProcessGroupGloo` / `ProcessGroupNCCL`), never
  as torch's global default group, so a new epoch needs no global teardown.
- Collectives are asynchronous; the caller waits on a condition that the op's
  completion *or* an abort wakes. `abort_below(E)` (the coordinator opened epoch E,
  or the driver said so) makes every wait of an older epoch raise `MeshChanged` at
  once: gloo cannot cancel an op in flight, so the old op is abandoned (it writes
  only into its own buffer and ends by its own timeout) and its group parked, never
  destroyed on the critical path (a gloo group's destructor joins its threads).
  NCCL groups are aborted (`ProcessGroupNCCL.abort`), never destroyed blocking.
- A wait longer than the collective timeout raises `CollectiveTimeout` (a hung peer).

NCCL is used when the tensors live on CUDA, gloo otherwise; the code path is the same.
"""

from __future__ import annotations

import datetime
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ftrl.wire.errors import FtrlError

log = logging.getLogger(__name__)



class MeshError(FtrlError):
    """A collective of the learner mesh did not complete."""


class MeshChanged(MeshError):
    """The mesh moved to a newer epoch while this collective waited."""


class CollectiveTimeout(MeshError):
    """A collective took longer than the collective timeout (a hung or lost peer)."""


class PeerLost(MeshError):
    """The process group reported a failed peer (connection closed, reset)."""


def backend_for(device: torch.device) -> str:
    """NCCL for CUDA tensors, gloo otherwise."""
    return "nccl" if device.type == "cuda" else "gloo"


class EpochMesh:
    """This process's membership in a learner mesh (see the module docstring)."""

    def __init__(self, host: str, collective_timeout_s: float, device: torch.device | None = None) -> None:
        self.host = host
        self.device = device or torch.device("cpu")
        self.backend = backend_for(self.device)
        self.timeout_s = float(collective_timeout_s)
        if self.backend == "nccl":
            os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
        self.store = dist.TCPStore(host, 0, None, True, datetime.timedelta(seconds=self.timeout_s),
                                   wait_for_workers=False)
        self.store_address = f"{host}:{self.store.port}"
        self.epoch = 0
        self.rank = -1
        self.world_size = 0
        self.pg: Any = None
        self._cond = threading.Condition()
        self._aborted_below = 0
        # left groups, kept referenced (not destroyed) until any op they had in flight must
        # have timed out: (left at, group, store client)
        self._graveyard: deque[tuple[float, Any, Any]] = deque()
        self._store_client: Any = None

    # ------------------------------------------------------------------ epochs

    def abort_below(self, epoch: int) -> None:
        """Every wait on a group older than `epoch` raises MeshChanged now."""
        with self._cond:
            if epoch <= self._aborted_below:
                return
            self._aborted_below = epoch
            self._cond.notify_all()
            pg, pg_epoch = self.pg, self.epoch  # read together: `enter` sets both under the lock
        if pg is not None and pg_epoch < epoch and self.backend == "nccl":
            try:
                pg.abort()
            except Exception as e:  # pragma: no cover - NCCL only
                log.warning("aborting the NCCL group of epoch %d: %s", pg_epoch, e)

    def _check(self, epoch: int) -> None:
        if epoch < self._aborted_below:
            raise MeshChanged(f"mesh epoch {epoch} was replaced by epoch {self._aborted_below}")

    def enter(self, epoch: int, rank: int, world_size: int, store_address: str, store_prefix: str) -> float:
        """Leave the current group and build the group of `epoch`. Returns seconds taken.
        Raises MeshChanged if a newer epoch opened meanwhile, CollectiveTimeout if the
        other members did not all arrive in time."""
        t0 = time.monotonic()
        self._check(epoch)
        self.leave()
        host, _, port = store_address.rpartition(":")
        timeout = datetime.timedelta(seconds=self.timeout_s)

        def make() -> tuple[Any, Any]:
            if store_address == self.store_address:
                client = self.store
            else:
                client = dist.TCPStore(host, int(port), None, False, timeout)
            store = dist.PrefixStore(store_prefix, client)
            if self.backend == "nccl":  # pragma: no cover - needs CUDA
                opts = dist.ProcessGroupNCCL.Options()
                opts._timeout = timeout
                return dist.ProcessGroupNCCL(store, rank, world_size, opts), client
            opts = dist.ProcessGroupGloo._Options()
            opts._timeout = timeout
            opts._devices = [dist.ProcessGroupGloo.create_device(hostname=self.host)]
            return dist.ProcessGroupGloo(store, rank, world_size, opts), client

        pg, client = self._run_abortable(make, epoch, f"forming epoch {epoch}")
        with self._cond:
            self.pg, self._store_client = pg, client
            self.epoch, self.rank, self.world_size = epoch, rank, world_size
        return time.monotonic() - t0

    def leave(self) -> None:
        """Park the current group (it may still have an op in flight)."""
        if self.pg is None:
            return
        now = time.monotonic()
        with self._cond:
            self._graveyard.append((now, self.pg, self._store_client))
            self.pg, self._store_client = None, None
            self.rank, self.world_size = -1, 0
        while self._graveyard and now - self._graveyard[0][0] > 2 * self.timeout_s:
            self._graveyard.popleft()

    def _run_abortable(self, fn: Callable[[], Any], epoch: int, what: str) -> Any:
        """Run a blocking call (group construction) on a thread; give up on abort or timeout."""
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = fn()
            except BaseException as e:
                box["error"] = e
            with self._cond:
                box["done"] = True
                self._cond.notify_all()

        threading.Thread(target=target, name=f"ftrl-mesh-{what}", daemon=True).start()
        self._wait(lambda: "done" in box, epoch, what)
        if "error" in box:
            raise PeerLost(f"{what}: {box['error']}") from box["error"]
        return box["value"]

    def _wait(self, done: Callable[[], bool], epoch: int, what: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        with self._cond:
            while not done():
                self._check(epoch)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CollectiveTimeout(
                        f"{what} took longer than the collective timeout ({self.timeout_s:g}s) "
                        f"in epoch {epoch}")
                self._cond.wait(remaining)

    # ------------------------------------------------------------------ collectives

    def _complete(self, work: Any, what: str) -> None:
        epoch = self.epoch
        fut = work.get_future()
        flag = {"done": False}

        def on_done(_: Any) -> None:
            with self._cond:
                flag["done"] = True
                self._cond.notify_all()

        fut.add_done_callback(on_done)
        self._wait(lambda: flag["done"], epoch, what)
        try:
            work.wait()
        except Exception as e:
            self._check(epoch)
            raise PeerLost(f"{what} in epoch {epoch} failed: {str(e)[:300]}") from e

    def _require_group(self) -> None:
        if self.pg is None:
            raise MeshChanged("not in a mesh epoch")
        self._check(self.epoch)

    def allreduce_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over the mesh in place (world of one: a no-op)."""
        self._require_group()
        if self.world_size == 1:
            return tensor
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.SUM
        self._complete(self.pg.allreduce([tensor], opts), "allreduce")
        return tensor

    def broadcast_(self, tensor: torch.Tensor, src: int) -> torch.Tensor:
        """Overwrite `tensor` with rank `src`'s copy, in place."""
        self._require_group()
        if self.world_size == 1:
            return tensor
        opts = dist.BroadcastOptions()
        opts.rootRank = int(src)
        opts.rootTensor = 0
        self._complete(self.pg.broadcast([tensor], opts), "broadcast")
        return tensor

    def close(self) -> None:
        self.abort_below(1 << 62)
        self.leave()
