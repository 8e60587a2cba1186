"""Hostile or broken input to the coordinator's policy and to an actor's caller fence,
without a network: forged caller claims, garbage worker reports, bad env entries."""

from __future__ import annotations

import pytest

from ftrl.coordinator.controller import MAX_INCARNATION, check_running
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.errors import (
    ActorUnavailableError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from ftrl.wire.limits import check_method
from ftrl.worker.fence import CallerFence
from tests.unit.coordinator.controller_harness import Harness

# ---------------------------------------------------------------- caller fence


class FakeCoordinator:
    """Answers the fence's GetActor lookups from a table; counts them."""

    def __init__(self) -> None:
        self.actors: dict[str, pb.ActorInfo] = {}
        self.lookups = 0
        self.down = False

    def set(self, name: str, incarnation: int, state: int = pb.ACTOR_ALIVE, valid_for_s: float = 5.0):
        self.actors[name] = pb.ActorInfo(name=name, incarnation=incarnation, state=state,
                                         valid_for_s=valid_for_s)

    async def lookup(self, name: str) -> pb.ActorInfo:
        self.lookups += 1
        if self.down:
            raise ActorUnavailableError("coordinator unreachable")
        if name not in self.actors:
            raise NotFoundError(name)
        return self.actors[name]


@pytest.fixture
def fence():
    coordinator = FakeCoordinator()
    now = [100.0]
    fence = CallerFence(coordinator.lookup, clock=lambda: now[0])
    fence.coordinator, fence.now = coordinator, now  # type: ignore[attr-defined]
    return fence


async def test_fence_verifies_and_trusts_only_for_valid_for_s(fence):
    co, now = fence.coordinator, fence.now
    await fence.check("client-7")  # a plain client: no lookup
    assert co.lookups == 0
    co.set("a", 1, valid_for_s=2.0)
    await fence.check("a@1")
    await fence.check("a@1")
    assert co.lookups == 1  # trusted
    now[0] += 2.5
    await fence.check("a@1")
    assert co.lookups == 2  # trust ran out with the caller's node lease


async def test_fence_refuses_replaced_and_dead_callers(fence):
    co = fence.coordinator
    co.set("a", 3)
    with pytest.raises(PermissionDeniedError, match="a@2 is fenced: a is now incarnation 3"):
        await fence.check("a@2")
    lookups = co.lookups
    with pytest.raises(PermissionDeniedError):
        await fence.check("a@1")  # older still: refused without asking again
    assert co.lookups == lookups
    co.set("b", 4, state=pb.ACTOR_DEAD)
    with pytest.raises(PermissionDeniedError, match="DEAD"):
        await fence.check("b@4")


async def test_fence_lets_calls_in_when_the_coordinator_is_away(fence):
    fence.coordinator.down = True
    await fence.check("a@1")
    await fence.check("ghost@5")


async def test_forged_newer_claim_does_not_fence_the_real_incarnation(fence):
    """A peer that claims to be "a@999" must not get the real a@1 refused."""
    co = fence.coordinator
    co.set("a", 1)
    await fence.check("a@999")  # not confirmed by the coordinator: let in, but not believed
    await fence.check("a@1")  # the real, current incarnation still gets through
    co.set("a", 2)  # ... until the coordinator says it was replaced
    fence.now[0] += 60
    with pytest.raises(PermissionDeniedError):
        await fence.check("a@1")


# ---------------------------------------------------------------- worker reports


def _running(name: str, incarnation: int = 1, **spec_fields) -> pb.RunningActor:
    spec = pb.ActorSpec(name=name, class_path=spec_fields.pop("class_path", "tests.actors:Counter"),
                        **spec_fields)
    return pb.RunningActor(spec=spec, incarnation=incarnation, address="127.0.0.1:1", pid=7)


@pytest.mark.parametrize(
    ("ra", "words"),
    [
        (_running("x", class_path="os:system; rm"), "class path"),
        (_running("x", resources={"cpu": -4.0}), "finite and >= 0"),
        (_running("x", resources={"cpu": float("nan")}), "finite and >= 0"),
        (_running("x", incarnation=0), "out of range"),
        (_running("x", incarnation=-440), "out of range"),
        (_running("x", incarnation=(1 << 63) - 1), "out of range"),
        (_running("x", max_restarts=-7), "out of range"),
        (_running("x", max_concurrency=5000), "out of range"),
    ],
)
def test_garbage_reported_actors_are_refused_not_adopted(ra, words):
    with pytest.raises(InvalidArgumentError, match=words):
        check_running(ra)
    h = Harness()
    reply = h.register("n1", running=[ra])
    assert "x" not in h.c.actors
    assert [(s.name, s.fenced) for s in reply.stop] == [("x", True)]
    assert words in reply.stop[0].reason
    assert h.c.nodes["n1"].actors == set() and h.c.nodes["n1"].used.get("cpu", 0.0) == 0.0
    h.advance(10)  # the node goes silent and is lost: nothing to move, nothing breaks
    assert [a.to_proto() for a in h.c.actors.values()] == []


def test_valid_reported_actor_is_still_adopted():
    h = Harness()
    ra = _running("ok", incarnation=5, resources={"cpu": 1.0})
    check_running(ra)
    reply = h.register("n1", running=[ra])
    assert not reply.stop
    assert h.c.actors["ok"].incarnation == 5


def test_reports_with_absurd_incarnations_are_ignored():
    h = Harness()
    h.register("n1")
    h.create("a")
    node, inc = h.started("a")
    for bad in ((1 << 63) - 1, MAX_INCARNATION, 0, -3):
        h.report(node, "a", bad, pb.REPORT_STARTED, pid=9, address="127.0.0.1:9")
    h.report(node, "a", inc, pb.REPORT_EXITED, restarting_locally=True,
             next_incarnation=(1 << 63) - 1, exit_code=1)
    rec = h.c.actors["a"]
    assert (rec.incarnation, rec.pid) == (inc, 1234)
    rec.to_proto()  # still serializable (no int64 overflow anywhere)
    h.advance(0.1)


# ---------------------------------------------------------------- create_actor input


@pytest.mark.parametrize("env", [{"A=B": "x"}, {"": "x"}, {"A\0": "x"}, {"A": "x\0y"}])
def test_env_entries_that_no_process_can_take_are_refused(env):
    h = Harness()
    h.register("n1")
    with pytest.raises(InvalidArgumentError, match="actor env variable"):
        h.create("e", env=codec.encode(env))
    assert "e" not in h.c.actors
    h.create("e", env=codec.encode({"GOOD_NAME": "any value ä"}))


def test_overlong_method_names_name_the_limit():
    with pytest.raises(InvalidArgumentError, match=r"201 characters .* the limit is 200"):
        check_method("x" * 201)
