"""Structured log lines: one key=value line per event, and what `ftrl logs` says when an
actor's log cannot be reached."""

from __future__ import annotations

import logging

import pytest

from ftrl.client.logs import _where
from ftrl.coordinator.events import EventLog, event_line
from ftrl.util.logfmt import job_of, kv, quote
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire.errors import ActorUnavailableError


def test_kv_quotes_free_text_and_skips_empty_fields():
    assert kv(event="X", node="n1", actor="", incarnation=None, n=0, f=1.5) == "event=X node=n1 n=0 f=1.5"
    assert kv(reason="plain") == 'reason="plain"'
    assert kv(reason='a "b"\\c\nnext') == r'reason="a \"b\"\\c\nnext"'
    assert quote("has space") == '"has space"' and quote("job/a:1@x") == "job/a:1@x"
    assert len(quote("x " * 1000)) < 320


@pytest.mark.parametrize("name,job", [("job/env_runner/0", "job"), ("solo", ""), ("/x", "")])
def test_job_of(name, job):
    assert job_of(name) == job


def test_event_lines():
    def line(type_, **kw) -> str:
        return event_line(pb.Event(type=type_, **kw))

    assert line(pb.EVENT_RESTARTED, actor="j1/env_runner/2", node_id="n1", incarnation=3,
                message="killed by signal SIGKILL\n--- last lines ---\nboom") == (
        'event=ACTOR_RESTARTED node=n1 actor=j1/env_runner/2 incarnation=3 job=j1 '
        'reason="killed by signal SIGKILL"')
    assert line(pb.EVENT_CREATED, actor="solo") == "event=ACTOR_CREATED actor=solo"
    assert line(pb.EVENT_NODE_LOST, node_id="n2", message="no heartbeat for 5s") == (
        'event=NODE_LOST node=n2 reason="no heartbeat for 5s"')
    assert line(pb.EVENT_JOB, actor="j1", message="RECOVERING: env runner 2 died") == (
        'event=JOB job=j1 stage=RECOVERING reason="env runner 2 died"')
    assert line(pb.EVENT_JOB, actor="j1", message="RUNNING") == "event=JOB job=j1 stage=RUNNING"


def test_each_event_is_one_info_line_on_ftrl_events(caplog):
    log = EventLog()
    with caplog.at_level(logging.INFO, logger="ftrl.events"):
        log.emit(pb.EVENT_DIED, "j/a", "n1", 2, "exited with code 1\ntraceback...")
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("ftrl.events", logging.INFO,
         'event=ACTOR_DIED node=n1 actor=j/a incarnation=2 job=j reason="exited with code 1"')]


def _actor(**kw) -> dict:
    return {"name": "j/a", "node_id": "", "state": "RESTARTING", "death_reason": "", **kw}


def _node(state: str = "ALIVE", log_address: str = "10.0.0.2:4000") -> dict:
    return {"node_id": "n2", "state": state, "log_address": log_address, "hostname": "h2",
            "address": "10.0.0.2"}


def test_where_a_log_is_or_why_not():
    nodes = {"n2": _node()}
    assert _where(_actor(node_id="n2", state="ALIVE"), nodes) == "10.0.0.2:4000"
    assert _where(_actor(node_id="n2", state="DEAD"), nodes) == "10.0.0.2:4000"  # dead: still there
    cases = [
        (_actor(node_id="n2"), {"n2": _node("LOST")}, "on node n2 (h2), which is LOST"),
        (_actor(node_id="n2"), {"n2": _node(log_address="")}, "does not serve logs"),
        (_actor(node_id="n9"), nodes, "ran on node n9, which the coordinator no longer knows"),
        (_actor(death_reason="node n2 lost (no heartbeat)\nmore"), nodes,
         "is on no node now (last: node n2 lost (no heartbeat))"),
        (_actor(state="PENDING"), nodes, "has not been placed on a node yet"),
    ]
    for actor, known, text in cases:
        with pytest.raises(ActorUnavailableError, match=text.replace("(", r"\(").replace(")", r"\)")):
            _where(actor, known)


@pytest.mark.parametrize("argv,verbose", [
    (["-v", "worker"], True), (["worker", "-v"], True), (["worker", "--verbose"], True),
    (["worker"], False), (["-v", "logs", "j"], True), (["logs", "j", "-v", "-f"], True),
    (["logs", "j"], False), (["node", "readmit", "-v", "n1"], True),
])
def test_verbose_flag_before_or_after_the_subcommand(argv, verbose, monkeypatch):
    from ftrl.cli import build_parser

    monkeypatch.delenv("FTRL_LOG_LEVEL", raising=False)
    args = build_parser().parse_args(argv)
    assert args.verbose is verbose and args.log_level == "INFO"
    assert build_parser().parse_args(["--log-level", "WARNING", *argv]).log_level == "WARNING"
