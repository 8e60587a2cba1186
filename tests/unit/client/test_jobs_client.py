"""The jobs SDK without a cluster: every accepted config form, local checks before any
call, the CLI's argument handling, and the client against a small in-process fake of
the coordinator's jobs API (long-poll, stop --wait, results replay, follow and
reconnect across a coordinator restart, the driver's report)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc import aio

import ftrl
from ftrl.cli import build_parser, main
from ftrl.cli.train import run_train
from ftrl.client.aio import AsyncClient
from ftrl.client.client import Client
from ftrl.client.jobs import (
    FINAL_STAGES,
    check_job_id,
    job_config,
    job_spec,
    job_to_dict,
    scale_count,
    stage_name,
    stage_value,
)
from ftrl.config import JobSpec, PPOConfig, StopCriteria, load_job
from ftrl.wire import codec
from ftrl.wire import ftrl_pb2 as pb
from ftrl.wire import ftrl_pb2_grpc as pb_grpc
from ftrl.wire.errors import (
    ERROR_TYPE_KEY,
    ConfigError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
)
from ftrl.wire.security import Security

JOB_TOML = """\
algo = "PPO"
[environment]
env = "CartPole-v1"
[env_runners]
num_env_runners = 1
[training]
lr = 0.01
train_batch_size = 64
minibatch_size = 64
[stop]
stop_iters = 3
"""

NOWHERE = "127.0.0.1:1"  # nothing listens: a call would fail with "unreachable"


# ---------------------------------------------------------------- config forms


def test_every_config_form_gives_the_same_job_dict(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(JOB_TOML)
    from_file = job_config(path)
    assert from_file["algo"] == "PPO" and from_file["env"] == "CartPole-v1"
    assert from_file["num_env_runners"] == 1 and from_file["lr"] == 0.01
    assert from_file["stop"] == {"stop_iters": 3}
    assert job_config(str(path)) == from_file
    import tomllib

    assert job_config(tomllib.loads(JOB_TOML)) == from_file  # a dict (tables)
    assert job_config(from_file) == from_file  # a flat dict (what job_to_dict makes)
    spec = load_job(path)
    assert job_config(spec) == from_file
    config = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=1)
              .training(lr=0.01, train_batch_size=64, minibatch_size=64))
    assert job_config(config, stop={"stop_iters": 3}) == from_file
    assert job_config(config, stop=StopCriteria(stop_iters=3)) == from_file
    # the stop argument goes over the file's [stop]; the inputs are not changed
    assert job_config(spec, stop={"stop_reward": 100.0})["stop"] == {"stop_iters": 3, "stop_reward": 100.0}
    assert spec.stop.stop_reward is None
    # round trip: what the driver and the coordinator load is the same job
    again = load_job(data=job_to_dict(spec))
    assert again.config == spec.config and again.stop == spec.stop


@pytest.mark.parametrize("bad, message", [
    ({"lrr": 0.1}, "did you mean 'lr'"),
    ({"training": {"num_epoch": 2}}, "did you mean 'num_epochs'"),
    ({"stop": {"stop_iter": 2}}, "did you mean 'stop_iters'"),
    ({"algo": "PPX"}, "unknown algorithm"),
    ({"num_env_runners": -1}, "num_env_runners"),
    ({"restart_failed_env_runners": True, "ignore_env_runner_failures": True}, "mutually exclusive"),
])
def test_bad_jobs_fail_locally_with_a_hint(bad, message):
    with pytest.raises(ConfigError, match=message):
        job_config({"env": "CartPole-v1", **bad})


def test_other_inputs_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="AlgorithmConfig, a JobSpec"):
        job_config(42)
    with pytest.raises(ConfigError, match="does not exist"):
        job_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="did you mean 'stop_reward'"):
        job_spec(PPOConfig().environment("CartPole-v1"), stop={"stop_rewrd": 1})


def test_ids_counts_and_stages():
    assert check_job_id("cart-pole_1.a") == "cart-pole_1.a"
    for bad in ("", "a/b", "a b", "x" * 81, 7):
        with pytest.raises(InvalidArgumentError):
            check_job_id(bad)  # type: ignore[arg-type]
    assert scale_count("env_runners", None) == -1 and scale_count("learners", 0) == 0
    for bad in (-1, -2, 10_001, True, 1.5, "3"):
        with pytest.raises(InvalidArgumentError):
            scale_count("env_runners", bad)  # type: ignore[arg-type]
    assert stage_value("running") == pb.JOB_RUNNING and stage_value("JOB_FAILED") == pb.JOB_FAILED
    assert stage_name(pb.JOB_RECOVERING) == "RECOVERING" and stage_name(99) == "UNKNOWN"
    with pytest.raises(InvalidArgumentError, match="unknown job stage"):
        stage_value("DONE")
    assert set(ftrl.JOB_STAGES) >= FINAL_STAGES == set(ftrl.FINAL_JOB_STAGES)


async def test_bad_input_fails_before_any_call():
    async with AsyncClient(NOWHERE, security=Security(token="t")) as client:
        with pytest.raises(ConfigError, match="did you mean 'lr'"):
            await client.submit({"env": "CartPole-v1", "lrr": 1})
        with pytest.raises(InvalidArgumentError, match="job id"):
            await client.submit({"env": "CartPole-v1"}, job_id="no spaces")
        with pytest.raises(InvalidArgumentError, match="between 0 and 10000"):
            await client.scale("j", env_runners=-3)
        with pytest.raises(InvalidArgumentError, match="env_runners or learners"):
            await client.scale("j")
        with pytest.raises(InvalidArgumentError, match="unknown job stage"):
            await client.report_job("j", 1, "BUSY", 0, 0, [])
        with pytest.raises(InvalidArgumentError, match="integer 'iteration'"):
            await client.report_job("j", 1, "RUNNING", 0, 0, [{"x": 1}])


# ---------------------------------------------------------------- CLI arguments


def test_cli_parses_the_job_commands(tmp_path):
    parse = build_parser().parse_args
    args = parse(["submit", "job.toml", "--resume", "--job-name", "j1", "--output", "out", "--set", "lr=0.1",
                  "--num-env-runners", "2", "--stop-iters", "5", "--coordinator", "h:1", "--token-file", "t"])
    assert (args.config, args.resume, args.job_name, args.output, args.overrides) == (
        "job.toml", True, "j1", "out", ["lr=0.1"])
    assert (args.num_env_runners, args.stop_iters, args.coordinator, args.token_file) == (2, 5, "h:1", "t")
    args = parse(["status", "j1", "--json"])
    assert args.job == "j1" and args.json
    assert parse(["status"]).job is None
    args = parse(["scale", "j1", "--env-runners", "4"])
    assert (args.job, args.env_runners, args.learners) == ("j1", 4, None)
    args = parse(["stop", "j1", "--wait"])
    assert args.wait and args.timeout == 600.0
    args = parse(["node", "readmit", "n1"])
    assert args.node == "n1" and args.fn.__name__ == "cmd_node_readmit"
    args = parse(["train", "--coordinator", "h:1", "--detach", "--job-name", "x"])
    assert args.detach and args.job_name == "x"


@pytest.mark.parametrize("argv, message", [
    (["scale", "j1"], "at least one of --env-runners, --learners"),
    (["scale", "j1", "--learners", "-1"], "between 0 and 10000"),
    (["scale", "j1", "--env-runners", "10001"], "between 0 and 10000"),
    (["scale", "j1", "--env-runners", "two"], "whole number"),
    (["submit"], "JOB.toml"),
    (["submit", "j.toml", "--job-name", "a/b"], "job id"),
    (["stop"], "JOB"),
    (["stop", "j", "--timeout", "0"], "must be > 0"),
    (["node"], "readmit"),
    (["node", "readmit"], "NODE"),
])
def test_cli_usage_errors_exit_2(capsys, argv, message):
    try:
        code = main(argv)  # refused by the command itself, before any call
    except SystemExit as e:  # refused by argparse
        code = e.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_cli_bad_job_file_exits_2_before_any_call(tmp_path, capsys):
    path = tmp_path / "job.toml"
    path.write_text(JOB_TOML)
    assert main(["submit", str(path), "--set", "lrr=1", "--coordinator", NOWHERE, "--token-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'lr'" in err and "unreachable" not in err and "Traceback" not in err
    assert main(["submit", str(tmp_path / "nope.toml"), "--coordinator", NOWHERE]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_unreachable_coordinator_is_a_clear_error(tmp_path, capsys):
    token = tmp_path / "token"
    token.write_text("t\n")
    for argv in (["status", "j"], ["stop", "j"], ["scale", "j", "--learners", "1"], ["node", "readmit", "n"]):
        assert main([*argv, "--coordinator", NOWHERE, "--token-file", str(token)]) == 1
        err = capsys.readouterr().err
        assert "unreachable" in err and "Traceback" not in err


def test_train_detach_needs_a_coordinator(tmp_path, capsys):
    args = build_parser().parse_args(["train", "--env", "CartPole-v1", "--detach", "--output", str(tmp_path / "o")])
    assert run_train(args) == 2
    assert "--detach needs --coordinator" in capsys.readouterr().err


# ---------------------------------------------------------------- a fake coordinator


class FakeJobs(pb_grpc.CoordinatorServicer):
    """The jobs API as the coordinator promises it, in memory (state outlives a server)."""

    def __init__(self) -> None:
        self.jobs: dict[str, pb.JobInfo] = {}
        self.rows: dict[str, list[pb.JobResult]] = {}
        self.changed = asyncio.Condition()
        self.calls: list[str] = []
        self.refuse: tuple | None = None  # (code, message[, error type name])

    async def _bump(self, job: pb.JobInfo) -> None:
        async with self.changed:
            job.seq += 1
            self.changed.notify_all()

    async def _job(self, job_id: str, context) -> pb.JobInfo:
        if job_id not in self.jobs:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no job {job_id!r}")
        return self.jobs[job_id]

    async def SubmitJob(self, request, context):
        self.calls.append("SubmitJob")
        if self.refuse:
            code, message, *error_type = self.refuse
            if error_type:  # as the coordinator names the error class where a code is ambiguous
                context.set_trailing_metadata(((ERROR_TYPE_KEY, error_type[0]),))
            await context.abort(code, message)
        try:
            spec = load_job(data=codec.decode(request.config))
            spec.config.validate()
        except ConfigError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        job_id = request.job_id or f"job-{len(self.jobs) + 1}"
        old = self.jobs.get(job_id)
        if old is not None and stage_name(old.stage) not in FINAL_STAGES:
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, f"job {job_id} is {stage_name(old.stage)}")
        self.jobs[job_id] = pb.JobInfo(
            job_id=job_id, stage=pb.JOB_RUNNING, config=request.config, resume=request.resume,
            output_dir=request.output_dir or f"/state/jobs/{job_id}", seq=1,
            num_env_runners=spec.config.num_env_runners, num_learners=spec.config.num_learners)
        self.rows[job_id] = []
        return self.jobs[job_id]

    async def GetJob(self, request, context):
        job = await self._job(request.job_id, context)
        async with self.changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait_for(lambda: job.seq > request.after_seq),
                                       request.wait_s)
        return job

    async def ListJobs(self, request, context):
        return pb.ListJobsReply(jobs=list(self.jobs.values()))

    async def ScaleJob(self, request, context):
        job = await self._job(request.job_id, context)
        if request.num_env_runners >= 0:
            job.num_env_runners = request.num_env_runners
        if request.num_learners >= 0:
            job.num_learners = request.num_learners
        await self._bump(job)
        return job

    async def StopJob(self, request, context):
        job = await self._job(request.job_id, context)
        if stage_name(job.stage) in FINAL_STAGES:
            return job
        job.stop_requested = True
        await self._bump(job)
        return job

    async def JobResults(self, request, context):
        job = await self._job(request.job_id, context)
        sent = request.after_iteration
        while True:
            for row in list(self.rows[job.job_id]):
                if row.iteration > sent:
                    sent = row.iteration
                    yield row
            if not request.follow or stage_name(job.stage) in FINAL_STAGES:
                return
            async with self.changed:
                seq = job.seq
                await self.changed.wait_for(lambda: job.seq > seq)  # noqa: B023

    async def ReportJob(self, request, context):
        job = await self._job(request.job_id, context)
        job.stage, job.iteration = request.stage, request.iteration
        job.env_steps_sampled, job.last_checkpoint = request.env_steps_sampled, request.last_checkpoint
        job.reason, job.driver_incarnation = request.reason, request.incarnation
        if request.rows:
            job.metrics = request.rows[-1].row
            self.rows[job.job_id].extend(request.rows)
        await self._bump(job)
        return job

    async def ReadmitNode(self, request, context):
        return pb.NodeInfo(node_id=request.node_id, state=pb.NODE_ALIVE)


class FakeCoordinator:
    """FakeJobs served on 127.0.0.1 from a thread of its own; `restart()` drops every
    connection and serves the same state again on the same port."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.jobs = self._run(self._make_state())
        self.server: aio.Server | None = None
        self.start()

    def _run(self, coro, timeout: float = 10.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _make_state(self) -> FakeJobs:
        return FakeJobs()

    async def _serve(self) -> aio.Server:
        server = aio.server()
        pb_grpc.add_CoordinatorServicer_to_server(self.jobs, server)
        server.add_insecure_port(self.address)
        await server.start()
        return server

    def start(self) -> None:
        self.server = self._run(self._serve())

    def stop(self) -> None:
        if self.server is not None:
            self._run(self.server.stop(0))
            self.server = None

    def restart(self, down_s: float = 0.5) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()

    def report(self, job_id: str, stage: str, iteration: int, incarnation: int = 1, reason: str = "") -> dict:
        """What the driver does after an iteration."""
        with Client(self.address, security=Security(token="t")) as client:
            rows = [{"iteration": iteration, "env_steps_sampled": 10 * iteration}] if iteration else []
            return client.report_job(job_id, incarnation, stage, iteration, 10 * iteration, rows,
                                     last_checkpoint=f"checkpoint_{iteration:08d}.ftrl", reason=reason)

    def close(self) -> None:
        self.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def fake() -> Iterator[FakeCoordinator]:
    coordinator = FakeCoordinator()
    yield coordinator
    coordinator.close()


@pytest.fixture
def client(fake) -> Iterator[Client]:
    with Client(fake.address, security=Security(token="t")) as c:
        yield c


def test_submit_status_scale_stop_against_the_contract(fake, client, tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(JOB_TOML)
    job_id = client.submit(path, job_id="cp", output_dir="rel/out", stop={"stop_iters": 5})
    assert job_id == "cp"
    sent = fake.jobs.jobs["cp"]
    assert codec.decode(sent.config)["stop"] == {"stop_iters": 5}
    assert sent.output_dir == str(Path("rel/out").absolute())  # made absolute here
    assert client.submit(PPOConfig().environment("CartPole-v1")).startswith("job-")  # id made by the coordinator

    status = client.job_status("cp")
    for key in ("job_id", "stage", "iteration", "env_steps_sampled", "metrics", "actors", "reason",
                "output_dir", "num_env_runners", "num_learners", "last_checkpoint", "seq"):
        assert key in status
    assert status["stage"] == "RUNNING" and status["config"]["env"] == "CartPole-v1"
    assert {j["job_id"] for j in client.jobs()} == {"cp", "job-2"}

    scaled = client.scale("cp", env_runners=3)
    assert (scaled["num_env_runners"], scaled["num_learners"]) == (3, 0) and scaled["seq"] > status["seq"]
    assert client.scale("cp", learners=2)["num_env_runners"] == 3

    fake.report("cp", "RUNNING", 1)
    status = client.job_status("cp")
    assert status["iteration"] == 1 and status["metrics"] == {"iteration": 1, "env_steps_sampled": 10}

    # wait_job: returns at once for an older seq, after the change for the current one
    assert client.wait_job("cp", status["seq"] - 1, timeout=5)["seq"] == status["seq"]
    started = time.monotonic()
    assert client.wait_job("cp", status["seq"], timeout=0.3)["seq"] == status["seq"]
    assert 0.25 <= time.monotonic() - started < 5
    threading.Timer(0.3, fake.report, ("cp", "RUNNING", 2)).start()
    assert client.wait_job("cp", status["seq"], timeout=10)["iteration"] == 2

    # stop(wait=True) returns once the driver reported a final stage
    assert client.stop("cp")["stop_requested"]
    threading.Timer(0.3, fake.report, ("cp", "STOPPED", 3)).start()
    final = client.stop("cp", wait=True, timeout=10)
    assert final["stage"] == "STOPPED" and final["iteration"] == 3
    assert client.stop("cp", wait=True, timeout=1)["stage"] == "STOPPED"  # a no-op now
    assert client.readmit_node("n1") == {**client.readmit_node("n1"), "node_id": "n1", "state": "ALIVE"}


def test_errors_of_the_coordinator(fake, client):
    with pytest.raises(NotFoundError, match="no job 'nope'"):
        client.job_status("nope")
    with pytest.raises(NotFoundError):
        client.stop("nope")
    client.submit({"env": "CartPole-v1"}, job_id="twice")
    with pytest.raises(ftrl.AlreadyExistsError):
        client.submit({"env": "CartPole-v1"}, job_id="twice")
    with pytest.raises(ftrl.FtrlTimeoutError, match="still RUNNING"):
        client.stop("twice", wait=True, timeout=0.3)
    # a job the coordinator refuses is a ConfigError, as one refused here
    fake.jobs.refuse = (grpc.StatusCode.INVALID_ARGUMENT, "unknown config key 'x'")
    with pytest.raises(ConfigError, match="unknown config key"):
        client.submit({"env": "CartPole-v1"})
    fake.jobs.refuse = (grpc.StatusCode.FAILED_PRECONDITION, "/o holds checkpoints; pass resume",
                        "FailedPreconditionError")
    with pytest.raises(FailedPreconditionError, match="pass resume"):
        client.submit({"env": "CartPole-v1"}, output_dir="/o")
    assert fake.jobs.calls.count("SubmitJob") == 4


def test_results_replay_then_follow_to_the_end(fake, client):
    client.submit({"env": "CartPole-v1"}, job_id="r")
    for i in (1, 2, 3):
        fake.report("r", "RUNNING", i)
    assert [row["iteration"] for row in client.results("r", follow=False)] == [1, 2, 3]
    assert [row["iteration"] for row in client.results("r", follow=False, after_iteration=2)] == [3]

    def drive() -> None:
        for i in (4, 5):
            time.sleep(0.1)
            fake.report("r", "RUNNING", i)
        fake.report("r", "FINISHED", 6)

    threading.Thread(target=drive).start()
    rows = list(client.results("r"))  # ends when the job does
    assert [row["iteration"] for row in rows] == [1, 2, 3, 4, 5, 6]


def test_results_survive_a_coordinator_restart(fake, client):
    client.submit({"env": "CartPole-v1"}, job_id="rr")
    fake.report("rr", "RUNNING", 1)
    seen: list[int] = []
    rows = client.results("rr", retry_s=30)
    seen.append(next(rows)["iteration"])
    fake.restart()
    fake.report("rr", "RUNNING", 2)
    seen.append(next(rows)["iteration"])
    fake.report("rr", "FINISHED", 3)
    seen.extend(row["iteration"] for row in rows)
    assert seen == [1, 2, 3]  # each once, in order


def test_results_survive_a_coordinator_that_lost_the_job(fake, client):
    """A coordinator restarted without its state knows the job again only once the
    driver's report rebuilt it: NOT_FOUND in between is part of the outage."""
    client.submit({"env": "CartPole-v1"}, job_id="lost")
    fake.report("lost", "RUNNING", 1)
    rows = client.results("lost", retry_s=30)
    assert next(rows)["iteration"] == 1
    fake.stop()
    job, kept = fake.jobs.jobs.pop("lost"), fake.jobs.rows.pop("lost")
    fake.start()

    def rebuild() -> None:
        time.sleep(0.5)
        fake.jobs.jobs["lost"], fake.jobs.rows["lost"] = job, kept
        fake.report("lost", "RUNNING", 2)
        fake.report("lost", "FINISHED", 3)

    helper = threading.Thread(target=rebuild)
    helper.start()
    assert [row["iteration"] for row in rows] == [2, 3]
    helper.join(10)


def test_results_give_up_after_the_retry_time(fake, client):
    client.submit({"env": "CartPole-v1"}, job_id="gone")
    rows = client.results("gone", retry_s=1.0)
    fake.stop()
    started = time.monotonic()
    with pytest.raises(ftrl.ActorUnavailableError, match="unreachable"):
        next(rows)
    assert time.monotonic() - started < 15


async def test_async_client_jobs(fake):
    async with AsyncClient(fake.address, security=Security(token="t")) as client:
        job_id = await client.submit(JobSpec(PPOConfig().environment("CartPole-v1"), StopCriteria(stop_iters=2)))
        await asyncio.to_thread(fake.report, job_id, "RUNNING", 1)
        await asyncio.to_thread(fake.report, job_id, "FINISHED", 2)
        assert [r["iteration"] async for r in client.results(job_id)] == [1, 2]
        info = await client.job_status(job_id)
        assert info["stage"] == "FINISHED" and info["last_checkpoint"] == "checkpoint_00000002.ftrl"
        assert info["driver_incarnation"] == 1
        with pytest.raises(ConfigError, match="did you mean"):
            await client.submit({"env": "CartPole-v1", "gamma_": 1})
