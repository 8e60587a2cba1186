"""The progress watchdog: fires only while armed and stalled; its default kills the process
with EXIT_WATCHDOG; an EnvRunner arms it around sampling and stamps every vector step."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from ftrl.config import PPOConfig
from ftrl.rl.sampling.env_runner import EnvRunner
from ftrl.util.watchdog import EXIT_WATCHDOG, ProgressWatchdog, exit_reason
from ftrl.worker.agent import describe_exit


def test_check_fires_only_when_armed_and_stalled_past_the_timeout():
    fired: list[float] = []
    wd = ProgressWatchdog(5.0, on_stall=fired.append)
    assert not wd.check(now=1e9)  # never armed
    wd.begin()
    t0 = wd.stamp
    assert not wd.check(now=t0 + 4.9)
    wd.stamp = t0 + 3.0  # progress moves the deadline
    assert not wd.check(now=t0 + 7.9)
    assert wd.check(now=t0 + 8.5)
    assert fired == [pytest.approx(5.5)]
    assert not wd.check(now=t0 + 100)  # fires once
    wd.close()


def test_disarmed_watchdog_never_fires_and_its_thread_stops():
    fired: list[float] = []
    wd = ProgressWatchdog(0.1, on_stall=fired.append)
    wd.begin()
    wd.end()
    time.sleep(0.4)
    assert fired == []
    wd.close()
    assert wd._thread is not None and not wd._thread.is_alive()


def test_thread_fires_on_a_stall():
    fired = threading.Event()
    wd = ProgressWatchdog(0.2, on_stall=lambda s: fired.set())
    wd.begin()
    try:
        assert fired.wait(10.0)
    finally:
        wd.close()


def test_after_a_pause_the_stall_clock_starts_again():
    fired: list[float] = []
    wd = ProgressWatchdog(5.0, on_stall=fired.append)
    wd.begin()
    t0 = wd.stamp
    wd.resumed(t0 + 60.0)  # the process was stopped for a minute right after the last stamp
    assert wd.stalled_for(t0 + 60.5) == pytest.approx(0.5)
    assert not wd.check(now=t0 + 64.9)
    assert wd.check(now=t0 + 65.5)  # still no progress a full timeout after the pause
    assert fired == [pytest.approx(5.5)]
    wd.close()


def test_a_stamp_earns_one_pause_credit():
    wd = ProgressWatchdog(5.0, on_stall=lambda s: None)
    wd.begin()
    t0 = wd.stamp
    assert wd.resumed(t0 + 10.0)
    assert not wd.resumed(t0 + 20.0)  # no progress since the last credit: the clock keeps running
    assert wd.stalled_for(t0 + 20.0) == pytest.approx(10.0)
    wd.stamp = t0 + 21.0
    assert wd.resumed(t0 + 30.0)  # progress, then another pause
    assert wd.stalled_for(t0 + 31.0) == pytest.approx(1.0)
    wd.close()


def test_a_hang_that_holds_the_gil_in_bursts_is_still_killed():
    """A hung env in C calls that hold the GIL longer than `pause_s` (with short releases
    between them) keeps the watchdog thread from ticking: those gaps are not pauses (the
    process was busy), so it is killed as before."""
    code = textwrap.dedent("""
        import time
        from ftrl.util.watchdog import ProgressWatchdog
        n = 10**6
        t = time.perf_counter(); sum(range(n)); dt = time.perf_counter() - t
        burst = int(n * 0.6 / dt)  # one C call of ~0.6 s, GIL held throughout
        wd = ProgressWatchdog(0.5, name="test/env_runner/1")
        assert wd.pause_s < 0.6
        wd.begin()
        while True:
            sum(range(burst))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == EXIT_WATCHDOG, proc.stderr


_PAUSED_CHILD = textwrap.dedent("""
    import os, select, sys, time
    from ftrl.util.watchdog import ProgressWatchdog
    wd = ProgressWatchdog(0.5, name="test/env_runner/1")
    wd.begin()
    print("ready", flush=True)
    while True:  # one "env step" per byte from the parent
        if select.select([0], [], [], 60)[0] and os.read(0, 1):
            wd.stamp = time.monotonic()
""")


@pytest.mark.parametrize("progress_after", [True, False])
def test_a_stopped_process_is_not_killed_for_the_pause(progress_after):
    """SIGSTOP for 4x the timeout (a VM pause looks the same): once continued, steps that
    go on keep the process alive; with no step after the pause it is killed a timeout
    later. The parent holds back the next step until the watchdog has surely ticked, so
    a watchdog that counted the pause would fire first."""
    proc = subprocess.Popen([sys.executable, "-c", _PAUSED_CHILD], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def steps(n: int) -> None:  # n env steps, 0.1 s apart
        for _ in range(n):
            try:
                proc.stdin.write(b"s")
                proc.stdin.flush()
            except BrokenPipeError:
                pytest.fail(f"the child is gone: {proc.stderr.read().decode()}")
            time.sleep(0.1)

    try:
        assert select.select([proc.stdout], [], [], 30)[0], "the child did not start"
        assert proc.stdout.readline() == b"ready\n"
        steps(5)
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(2.0)
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.25)  # the watchdog ticks every 0.0625 s
        if progress_after:
            steps(15)
            assert proc.poll() is None, proc.stderr.read().decode()
        else:
            assert proc.wait(timeout=20) == EXIT_WATCHDOG
            assert "env step hung for" in proc.stderr.read().decode()
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.parametrize("spin", [False, True])
def test_default_action_ends_the_process_with_its_exit_code(spin):
    """A Python busy loop (GIL held between switch intervals) or a sleep: both killed."""
    hang = "while True: pass" if spin else "time.sleep(60)"
    code = textwrap.dedent(f"""
        import time
        from ftrl.util.watchdog import ProgressWatchdog
        wd = ProgressWatchdog(0.5, name="test/env_runner/1")
        wd.begin()
        {hang}
    """)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert proc.returncode == EXIT_WATCHDOG, proc.stderr
    assert time.monotonic() - t0 < 25
    assert "event=WATCHDOG_KILL" in proc.stderr
    assert "env step hung for" in proc.stderr and "actor=test/env_runner/1" in proc.stderr


def test_the_worker_names_the_exit_code():
    assert "watchdog" in exit_reason(EXIT_WATCHDOG)
    assert "watchdog" in describe_exit(EXIT_WATCHDOG)
    assert describe_exit(1) == "exited with code 1"


def _hang_config(mode: str, hang_s: float) -> PPOConfig:
    return (
        PPOConfig()
        .environment("ftrl.testing.envs:make_hang_env", env_config={"hang_after": 5, "mode": mode, "hang_s": hang_s})
        .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=10, env_step_timeout_s=0.3)
        .debugging(seed=0)
    )


def test_env_runner_arms_the_watchdog_only_while_sampling(monkeypatch):
    stalls: list[float] = []
    # in this process a stall must be recorded, never end pytest (construction is armed too)
    monkeypatch.setattr(ProgressWatchdog, "_kill", lambda self, stalled: stalls.append(stalled))
    runner = EnvRunner(_hang_config("sleep", 1.0).to_dict(), worker_index=1, set_torch_threads=False,
                       watchdog=True)
    wd = runner._watchdog
    assert isinstance(wd, ProgressWatchdog)
    assert stalls == []  # building 2 CartPoles is quick
    try:
        runner.sample()  # the 5th step sleeps 1 s > 0.3 s: the watchdog fires
        assert len(stalls) == 1 and stalls[0] > 0.3
        assert wd.stamp == 0.0  # disarmed after the call
        wd.fired = False
        time.sleep(0.6)  # idle between calls: never a stall
        assert len(stalls) == 1
        runner.sample()  # no hang this time (each env hangs once): no stall
        assert len(stalls) == 1
    finally:
        runner.stop()
    assert wd._thread is not None and not wd._thread.is_alive()


def test_in_process_runner_has_no_watchdog_by_default():
    runner = EnvRunner(_hang_config("sleep", 0.0).to_dict(), worker_index=1, set_torch_threads=False)
    try:
        assert not isinstance(runner._watchdog, ProgressWatchdog)
        runner.sample()
    finally:
        runner.stop()


def _runner_script(body: str, marker: str, mode: str) -> str:
    return textwrap.dedent(f"""
        import os
        from ftrl.config import PPOConfig
        from ftrl.rl.sampling.env_runner import EnvRunner
        cfg = (PPOConfig()
               .environment("ftrl.testing.envs:make_hang_env",
                            env_config={{"hang_in": "make", "mode": {mode!r}, "hang_s": 60, "marker": {marker!r}}})
               .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=10, env_step_timeout_s=0.3))
    """) + textwrap.dedent(body)


@pytest.mark.parametrize("mode", ["sleep", "spin"])
def test_a_hung_env_constructor_ends_the_runner_process(tmp_path, mode):
    """Building the sub-envs is watched too: a constructor that hangs ends the process."""
    code = _runner_script("""
        EnvRunner(cfg.to_dict(), worker_index=1, set_torch_threads=False, watchdog=True)
        print("constructed")
    """, str(tmp_path / "hung"), mode)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == EXIT_WATCHDOG, proc.stderr
    assert "constructed" not in proc.stdout
    assert "env construction hung for" in proc.stderr
    assert time.monotonic() - t0 < 30


def test_a_soft_restart_whose_env_constructor_hangs_ends_the_runner_process(tmp_path):
    """reset_envs() (a soft restart) holds the runner's lock while it builds: a hang there
    would block every later call, so the watchdog ends the process instead."""
    marker = tmp_path / "hung"
    marker.write_text("taken")  # no env hangs while the marker exists
    code = _runner_script(f"""
        runner = EnvRunner(cfg.to_dict(), worker_index=1, set_torch_threads=False, watchdog=True)
        runner.sample()
        print("sampled", flush=True)
        os.unlink({str(marker)!r})  # the next env built hangs
        runner.reset_envs()
        print("reset")
    """, str(marker), "sleep")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == EXIT_WATCHDOG, proc.stderr
    assert "sampled" in proc.stdout and "reset" not in proc.stdout
    assert "env construction hung for" in proc.stderr


def test_building_envs_disarms_the_watchdog_when_done(monkeypatch):
    stalls: list[float] = []
    monkeypatch.setattr(ProgressWatchdog, "_kill", lambda self, stalled: stalls.append(stalled))
    cfg = (PPOConfig().environment("CartPole-v1")
           .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=5, env_step_timeout_s=0.2))
    runner = EnvRunner(cfg.to_dict(), worker_index=1, set_torch_threads=False, watchdog=True)
    try:
        assert runner._watchdog.stamp == 0.0  # disarmed once the envs are built
        runner.reset_envs()
        assert runner._watchdog.stamp == 0.0
        time.sleep(0.5)  # idle: no stall
        runner.sample()
        assert stalls == []
    finally:
        runner.stop()


def test_a_failed_soft_restart_leaves_every_sub_env_to_be_rebuilt(monkeypatch):
    """One of 3 sub-envs fails to build in reset_envs(): the error reaches the caller, and
    the next sample rebuilds all of them instead of running on a partial list."""
    from ftrl.rl.sampling import env_runner as er

    cfg = PPOConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=3, rollout_fragment_length=4)
    runner = EnvRunner(cfg.to_dict(), worker_index=1, set_torch_threads=False)
    real, calls = er.make_sub_env, []

    def flaky(i, *args, **kwargs):
        calls.append(i)
        if len(calls) == 2:
            raise RuntimeError("simulator did not come up")
        return real(i, *args, **kwargs)

    monkeypatch.setattr(er, "make_sub_env", flaky)
    try:
        with pytest.raises(RuntimeError, match="simulator"):
            runner.reset_envs()
        assert len(runner._envs) == 3 and runner._broken == {0, 1, 2}
        out = runner.sample()
        assert out["env_steps"] == 12 and out["batch"]["obs"].shape == (4, 3, 4)
        assert calls == [0, 1, 0, 1, 2] and len(runner._envs) == 3
    finally:
        runner.stop()


def test_a_constructor_failure_after_the_envs_are_built_leaves_no_watchdog_thread(monkeypatch):
    from ftrl.rl.sampling import env_runner as er

    def broken_policy(*args, **kwargs):
        raise RuntimeError("no policy")

    monkeypatch.setattr(er, "make_policy", broken_policy)
    before = {t.ident for t in threading.enumerate() if t.name == "ftrl-watchdog"}
    cfg = PPOConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=2)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="no policy"):
            EnvRunner(cfg.to_dict(), worker_index=1, set_torch_threads=False, watchdog=True)
    after = {t.ident for t in threading.enumerate() if t.name == "ftrl-watchdog" and t.is_alive()}
    assert after <= before

