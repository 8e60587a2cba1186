"""The warm-spare pool's preload spec `MODULES[;first:MODULES]`: the worker's first actor
gets a spare of its own that imported the second list (started at once, beside the
pool's spares, never refilled); every other actor gets a pool spare."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from ftrl.worker import processes
from ftrl.worker.processes import SparePool, parse_preload


class FakeHost:
    """Stands in for an ActorProcess: records what it was asked to preload."""

    _pids = itertools.count(1000)

    def __init__(self, preload: str) -> None:
        self.preload = preload
        self.pid = next(self._pids)
        self.returncode: int | None = None
        self.ready = asyncio.get_running_loop().create_future()
        self.ready_task: asyncio.Task | None = None
        self.signals: list[int] = []
        self.closed = False

    async def read(self) -> dict[str, Any]:
        return {"kind": "ready"}

    def signal(self, sig: int) -> None:
        self.signals.append(sig)
        self.returncode = -sig

    def close(self) -> None:
        self.closed = True

    async def wait(self) -> int:
        return self.returncode or 0


@pytest.fixture
def spawned(monkeypatch) -> list[FakeHost]:
    """Every spare the pool starts, as FakeHosts (cold spawns only: no fork server)."""
    monkeypatch.setenv("FTRL_NO_ZYGOTE", "1")
    hosts: list[FakeHost] = []

    async def fake_spawn_host(preload: str, log_path: Path, env: dict[str, str]) -> FakeHost:
        host = FakeHost(preload)
        hosts.append(host)
        return host

    monkeypatch.setattr(processes, "spawn_host", fake_spawn_host)
    return hosts


def test_parse_preload():
    assert parse_preload("") == ("", "")
    assert parse_preload("ftrl.rl.sampling.env_runner") == ("ftrl.rl.sampling.env_runner", "")
    assert parse_preload("a,b;first:torch,c") == ("a,b", "torch,c")
    assert parse_preload(";first:torch") == ("", "torch")
    with pytest.raises(ValueError, match="first:MODULES"):
        parse_preload("a;second:torch")


async def _settle(until, timeout: float = 5.0) -> None:
    """Let the pool's task run until `until()` holds (TimeoutError after `timeout`)."""
    for _ in range(int(timeout / 0.01)):
        if until():
            return
        await asyncio.sleep(0.01)
    raise TimeoutError("the pool did not get there")


def test_the_first_actor_gets_the_first_spare_and_it_is_not_refilled(spawned, tmp_path):
    async def main() -> None:
        pool = SparePool(2, "light;first:torch,driver", tmp_path, {})
        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(pool.maintain())
            await _settle(lambda: len(spawned) == 3)
            # started at once, before the pool's spares, without waiting for either
            assert [h.preload for h in spawned] == ["torch,driver", "light", "light"]
            first = await pool.acquire()
            assert first is spawned[0]
            runners = [await pool.acquire(), await pool.acquire()]
            assert [h.preload for h in runners] == ["light", "light"]
            await _settle(lambda: len(spawned) == 5)  # the pool refills its own spares only
            assert [h.preload for h in spawned[3:]] == ["light", "light"]
            later = await pool.acquire()
            assert later.preload == "light"
            task.cancel()
        assert not first.signals  # handed out: the pool does not kill it

    asyncio.run(main())


def test_an_unused_or_dead_first_spare(spawned, tmp_path):
    async def main() -> None:
        pool = SparePool(1, "light;first:torch", tmp_path, {})
        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(pool.maintain())
            await _settle(lambda: len(spawned) == 2)
            spawned[0].returncode = 1  # the first spare died before any actor came
            host = await pool.acquire()
            assert host.preload == "light" and spawned[0].closed
            task.cancel()

        pool = SparePool(1, "light;first:torch", tmp_path, {})
        spawned.clear()
        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(pool.maintain())
            await _settle(lambda: len(spawned) == 2)
            task.cancel()
        assert spawned[0].preload == "torch" and spawned[0].signals  # killed with the pool

    asyncio.run(main())


def test_without_first_every_actor_gets_a_pool_spare(spawned, tmp_path):
    async def main() -> None:
        pool = SparePool(1, "light", tmp_path, {})
        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(pool.maintain())
            await _settle(lambda: len(spawned) == 1)
            assert (await pool.acquire()).preload == "light"
            task.cancel()

    asyncio.run(main())
