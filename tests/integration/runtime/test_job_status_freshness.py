"""`job_status` after a coordinator SIGKILL and restart (same state dir) while a job trains:
fresh soon after the first answer, and never moving back (the driver's job link reports
its current state and newest row first, the rows of the outage after it; the
coordinator keeps the newest row shown)."""

from __future__ import annotations

import json
import signal
import time

from tests.cluster import wait_until

# a quick job (no checkpoint every iteration): many rows while the coordinator is down
JOB = {"algo": "ppo", "env": "CartPole-v1", "num_env_runners": 1, "num_envs_per_env_runner": 4,
       "train_batch_size": 256, "minibatch_size": 256, "num_epochs": 2,
       "checkpoint_interval": 100, "stop": {"stop_iters": 100_000}}
BACKLOG = 200  # rows written while the coordinator is down: two report batches (100 rows each)
ROW_LAG = 25  # the most the shown row may lag the shown iteration (rows come while history is sent)


def _driver_iteration(output) -> int:
    """The iteration of the newest row of the job's metrics.jsonl (0 before the first)."""
    path = output / "metrics.jsonl"
    if not path.exists():
        return 0
    for line in reversed(path.read_text().splitlines()):
        try:
            return int(json.loads(line)["iteration"])
        except ValueError:  # a row being written
            continue
    return 0


def test_status_is_fresh_soon_and_never_goes_back_after_a_coordinator_kill(make_cluster, tmp_path):
    cl = make_cluster(workers=1, slots=3)
    c = cl.client()
    out = tmp_path / "fresh"
    c.submit(JOB, job_id="fresh", output_dir=str(out))
    wait_until(lambda: c.job_status("fresh")["iteration"] >= 3, 180, what="the job to train")
    shown: list[tuple[int, int]] = []  # (iteration, the shown row's iteration) of every record read

    def note(status: dict) -> dict:
        shown.append((status["iteration"], int(status["metrics"].get("iteration") or 0)))
        return status

    def look() -> tuple[int, int]:
        note(c.job_status("fresh"))
        return shown[-1]

    for _ in range(20):
        look()
        time.sleep(0.02)
    before = len(shown)

    cl.coordinator_proc.send_signal(signal.SIGKILL)
    cl.coordinator_proc.wait(10)
    at_kill = _driver_iteration(out)
    wait_until(lambda: _driver_iteration(out) >= at_kill + BACKLOG, 120,
               what=f"the driver to write {BACKLOG} rows while the coordinator is down")
    cl.start_coordinator()
    first = wait_until(lambda: note(c.job_status("fresh")), 60, interval=0.02,
                       what="the restarted coordinator's first answer")
    t0 = time.monotonic()
    # the record as the driver's first report after the restart (or a later one) left it
    note(c.wait_job("fresh", after_seq=first["seq"], timeout=10))
    caught_up = None
    while time.monotonic() - t0 < 10.0 and (caught_up is None or time.monotonic() - caught_up < 1.0):
        iteration, row = look()
        driver = _driver_iteration(out)
        if caught_up is None and iteration >= driver - 1 and row >= driver - 1:
            caught_up = time.monotonic()
        time.sleep(0.02)
    assert caught_up is not None, f"still {shown[-1]} 10 s after the first answer; the driver is at {driver}"

    # never back: each shown iteration and row is at least any shown before (the kill included)
    iterations, rows = [i for i, _ in shown], [r for _, r in shown]
    assert iterations == sorted(iterations), shown
    assert rows == sorted(rows), shown
    assert iterations[before] >= iterations[before - 1]
    # the current state first: once the restarted coordinator has the driver's report, the
    # row it shows is the driver's newest then, not the oldest of the outage
    reported = [(i, r) for i, r in shown[before:] if i > iterations[before - 1]]
    assert reported and all(r >= i - ROW_LAG for i, r in reported), reported[:5]

    # every row arrived (the history after the newest): a replay has them all, in order
    replayed = [row["iteration"] for row in c.results("fresh", follow=False)]
    assert replayed == list(range(1, len(replayed) + 1)) and len(replayed) >= at_kill + BACKLOG
    assert c.stop("fresh", wait=True, timeout=120)["stage"] == "STOPPED"
