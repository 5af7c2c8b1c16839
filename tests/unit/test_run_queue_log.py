"""The per-rank CPU / run-queue wait log: measurement, file format, host load."""

from __future__ import annotations

import json
import time

import pytest

from stragglerlab.run.run_folder import RunFolder
from stragglerlab.run.run_queue_log import (
    StepWait,
    append_records,
    foreign_cores,
    host_busy_s,
    read_records,
    thread_totals,
)
from stragglerlab.workloads.run_queue_monitor import RunQueueMonitor


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_thread_totals_grow_with_cpu_work():
    before = thread_totals()
    if before is None:
        pytest.skip("no schedstat on this kernel")
    _spin(0.2)
    after = thread_totals()
    assert after[0] - before[0] >= 0.1  # at least half the spin was on a CPU
    assert after[1] >= before[1] >= 0.0


def test_host_busy_reads_proc_stat_and_a_fake_one(tmp_path):
    fake = tmp_path / "stat"
    tck = __import__("os").sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal: busy = all but idle and iowait
    fake.write_text(f"cpu  {tck} 0 {tck} {50 * tck} {7 * tck} 0 0 0 0 0\ncpu0 1 2 3\n")
    assert host_busy_s(str(fake)) == pytest.approx(2.0)
    assert host_busy_s(str(tmp_path / "missing")) is None
    (tmp_path / "bad").write_text("cpu  x y z\n")
    assert host_busy_s(str(tmp_path / "bad")) is None


def test_records_round_trip_and_a_torn_tail_is_dropped(tmp_path):
    path = tmp_path / "cpu" / "rank0.jsonl"
    recs = [StepWait(step=s, cpu_s=0.5, wait_s=0.1 * s, wall_s=1.0, host_busy_s=1.5)
            for s in range(3)]
    append_records(path, recs[:2])
    append_records(path, recs[2:])
    assert read_records(path) == recs
    with open(path, "a") as f:
        f.write('{"step": 3, "cpu_s": 0.5, "wai')  # killed mid-write
    assert read_records(path) == recs
    assert read_records(tmp_path / "nope.jsonl") == []


@pytest.mark.parametrize("line", [
    '{"step": 1, "cpu_s": NaN, "wait_s": 0, "wall_s": 1}',
    '{"step": 1, "cpu_s": -1, "wait_s": 0, "wall_s": 1}',
    '{"step": 1, "cpu_s": "a", "wait_s": 0, "wall_s": 1}',
    '{"step": 1, "wait_s": 0, "wall_s": 1}',
    '[1, 2, 3]',
    '{"step": 1, "cpu_s": 1, "wait_s": 0, "wall_s": 1, "host_busy_s": 1e300}',
])
def test_a_damaged_line_ends_the_read(tmp_path, line):
    path = tmp_path / "rank0.jsonl"
    good = {"step": 0, "cpu_s": 0.5, "wait_s": 0.1, "wall_s": 1.0}
    path.write_text(json.dumps(good) + "\n" + line + "\n" + json.dumps(good) + "\n")
    assert [r.step for r in read_records(path)] == [0]


def test_foreign_cores_is_host_busy_the_ranks_did_not_use():
    def rec(step, cpu, busy):
        return StepWait(step=step, cpu_s=cpu, wait_s=0.0, wall_s=2.0, host_busy_s=busy)
    by_rank = [[rec(0, 0.5, 1.0), rec(1, 0.5, 3.0)],
               [rec(0, 0.5, 1.0), rec(1, 0.5, 3.0), rec(2, 0.5, 9.0)]]
    # step 0: the ranks used all the host did; step 1: 2 CPU-s more over 2 s = 1 core
    assert foreign_cores(by_rank) == {0: 0.0, 1: pytest.approx(1.0)}
    assert foreign_cores([]) == {}


def test_monitor_writes_one_record_per_step_into_the_run_folder(tmp_path):
    folder = RunFolder(path=tmp_path)
    mon = RunQueueMonitor(folder.cpu_log_path(2))
    for step in range(3):
        mon.begin()
        _spin(0.02)
        mon.end(step)
    mon.flush()
    recs = read_records(folder.cpu_log_path(2))
    if thread_totals() is None:
        assert recs == []
        return
    assert [r.step for r in recs] == [0, 1, 2]
    assert all(r.wall_s >= 0.02 and 0.0 < r.cpu_s <= r.wall_s * 1.5 for r in recs)
    assert all(r.host_busy_s is None or r.host_busy_s >= 0.0 for r in recs)
