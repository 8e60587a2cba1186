"""ActorServicer._execute without a network: sync methods run and are encoded on the call
thread, async ones on the loop; a sync method returning an awaitable is awaited; errors
(raised, or a result that is not msgpack-able) come back as RemoteError."""

from __future__ import annotations

import asyncio
import threading

import numpy as np

from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.worker.actor_server import ActorServicer


class Obj:
    def __init__(self) -> None:
        self.threads: list[str] = []

    def sync(self, x: int) -> dict:
        self.threads.append(threading.current_thread().name)
        return {"x": x, "arr": np.arange(100_000, dtype=np.float32)}  # out of band: several parts

    async def coro(self, x: int) -> int:
        self.threads.append(threading.current_thread().name)
        return x + 1

    def returns_awaitable(self, x: int):
        return self.coro(x)

    def boom(self) -> None:
        raise ValueError("boom")

    def unencodable(self) -> object:
        return object()


def _run(servicer: ActorServicer, name: str, *args, join: bool = False):
    async def go():
        return await servicer._execute(getattr(servicer.obj, name), list(args), {}, join=join)

    return asyncio.run(go())


def test_sync_result_is_encoded_on_the_call_thread_and_joined_for_unary():
    obj = Obj()
    servicer = ActorServicer(obj, "t", 1)
    try:
        parts, total = _run(servicer, "sync", 3)
        assert len(parts) > 1 and sum(len(p) for p in parts) == total
        out = codec.decode_parts(b"".join(parts))
        assert out["x"] == 3 and out["arr"][-1] == 99_999
        (data,), total2 = _run(servicer, "sync", 4, join=True)
        assert len(data) == total2 and codec.decode_parts(data)["x"] == 4
        assert all(name.startswith("ftrl-call") for name in obj.threads)
        assert servicer.in_flight == 0
    finally:
        servicer.executor.shutdown(wait=True)


def test_async_and_awaitable_results():
    obj = Obj()
    servicer = ActorServicer(obj, "t", 1)
    try:
        (data,), _ = _run(servicer, "coro", 1, join=True)
        assert codec.decode_parts(data) == 2
        (data,), _ = _run(servicer, "returns_awaitable", 5, join=True)
        assert codec.decode_parts(data) == 6
    finally:
        servicer.executor.shutdown(wait=True)


def test_errors_come_back_as_remote_errors():
    servicer = ActorServicer(Obj(), "t", 1)
    try:
        err = _run(servicer, "boom")
        assert isinstance(err, pb.RemoteError) and err.type == "ValueError" and "boom" in err.message
        err = _run(servicer, "unencodable", join=True)
        assert isinstance(err, pb.RemoteError) and "encode" in err.message
        assert servicer.in_flight == 0
    finally:
        servicer.executor.shutdown(wait=True)
