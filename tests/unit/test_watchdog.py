"""The progress watchdog: fires only while armed and stalled; its default kills the process
with EXIT_WATCHDOG; an EnvRunner arms it around sampling and stamps every vector step."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from ftrl.config import PPOConfig
from ftrl.rl.env_runner import EnvRunner
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
        .environment("ftrl.rl.testing_envs:make_hang_env", env_config={"hang_after": 5, "mode": mode, "hang_s": hang_s})
        .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=10, env_step_timeout_s=0.3)
        .debugging(seed=0)
    )


def test_env_runner_arms_the_watchdog_only_while_sampling():
    runner = EnvRunner(_hang_config("sleep", 1.0).to_dict(), worker_index=1, set_torch_threads=False,
                       watchdog=True)
    stalls: list[float] = []
    wd = runner._watchdog
    assert isinstance(wd, ProgressWatchdog)
    wd.on_stall = stalls.append
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
