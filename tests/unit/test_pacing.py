"""ComputePacer: an op takes at least its thread CPU time over the share; off does nothing."""

from __future__ import annotations

import time

import pytest

from stragglerlab.workloads.pacing import ComputePacer, one_rate_per_work


def _burn(seconds: float) -> None:
    """Spend about `seconds` of this thread's CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_paced_op_lasts_at_least_cpu_over_share():
    pacer = ComputePacer(cores=0.25)
    wall0 = time.perf_counter()
    cpu0 = time.thread_time()
    with pacer.op():
        _burn(0.02)
    cpu = time.thread_time() - cpu0
    wall = time.perf_counter() - wall0
    # The pacer sleeps until the op's wall time is its CPU over the share (4x): held against
    # the CPU it measured itself, since this thread's count also holds the pacer's own
    # bookkeeping (about 1 ms of 21 on a loaded 2-core host).
    op_cpu = pacer.samples[-1][0]
    assert 0.02 <= op_cpu <= cpu
    assert wall >= op_cpu / 0.25
    assert pacer.ops == 1 and pacer.ops_padded == 1
    assert pacer.padded_s > 0.02


def test_current_share_overrides_the_rank_share():
    pacer = ComputePacer(cores=1.0)
    wall0 = time.perf_counter()
    with pacer.op(cores=0.5):  # e.g. the slow-worker injector halved the quota
        _burn(0.02)
    assert time.perf_counter() - wall0 >= 0.02 / 0.5 * 0.98


def test_pacing_off_never_sleeps():
    pacer = ComputePacer(cores=None)
    with pacer.op(cores=0.1):  # a current share alone does not switch pacing on
        _burn(0.005)
    assert pacer.ops == 0 and pacer.padded_s == 0.0


def test_an_op_already_at_its_rate_is_untouched():
    pacer = ComputePacer(cores=1.0)
    with pacer.op():
        time.sleep(0.01)  # waiting costs no CPU: the op is slower than cpu / share already
    assert pacer.ops == 1 and pacer.ops_padded == 0


def test_warmup_rate_paces_a_slot_to_its_warmup_time_over_the_share_now():
    pacer = ComputePacer(cores=1.0, margin=1.2, warmup_rate=True)
    for _ in range(3):  # warm-up: the CPU rule, timed per slot
        with pacer.op(slot=1):
            _burn(0.01)
    with pacer.op(slot=0):
        _burn(0.002)
    pacer.settle(slots=3)  # no process group: this rank's medians
    assert pacer.rate[2] == 0.0 and pacer.rate[1] >= 0.0098 and pacer.rate[0] > 0
    wall0 = time.perf_counter()
    with pacer.op(slot=1):
        pass  # no work at all: still lasts the slot's nominal time
    assert time.perf_counter() - wall0 >= 0.98 * 1.2 * pacer.rate[1]
    wall0 = time.perf_counter()
    # A 2x slow device: exactly twice the nominal time, whatever quota the injector wrote
    # (its cut keeps CPU for the rank's other threads, so the share now is above 0.5).
    with pacer.op(cores=0.6, slot=1, device_factor=2.0):
        pass
    took = time.perf_counter() - wall0
    # (pacing to the share now would give 1.2 x rate / 0.6, short of 2 x 1.2 x rate)
    assert took >= 0.98 * 2 * 1.2 * pacer.rate[1] > 1.2 * pacer.rate[1] / 0.6
    assert pacer.over_target == 0


def test_a_host_stall_inside_a_settled_op_comes_on_top_of_its_nominal_time():
    stalled = [0.0]
    pacer = ComputePacer(cores=1.0, margin=1.0, warmup_rate=True, stall_s=lambda: stalled[0])
    with pacer.op(slot=0):
        _burn(0.02)  # warm-up: 0.02 s of work at a full core
    pacer.settle(slots=1)
    assert pacer.settled
    wall0 = time.perf_counter()
    with pacer.op(slot=0):
        time.sleep(0.015)
        stalled[0] += 0.015  # a 15 ms GC pause inside the op: not absorbed by the padding
    assert time.perf_counter() - wall0 >= 0.98 * (pacer.rate[0] + 0.015)


def test_warmup_rate_off_keeps_the_cpu_rule():
    pacer = ComputePacer(cores=1.0, margin=1.0)
    with pacer.op(slot=0):
        _burn(0.05)
    pacer.settle(slots=1)
    assert pacer.rate is None
    wall0 = time.perf_counter()
    with pacer.op(slot=0):
        pass  # the CPU rule: no CPU, no sleep (a warm-up rate would sleep >= 0.05 s)
    assert time.perf_counter() - wall0 < 0.04


def test_the_rate_follows_the_latest_window_and_forgets_the_cold_start():
    pacer = ComputePacer(cores=1.0, margin=1.0, warmup_rate=True, window=3)
    with pacer.op(slot=0):
        _burn(0.05)  # a cold first op
    pacer.forget()
    for _ in range(3):
        with pacer.op(slot=0):
            _burn(0.004)
    pacer.settle(slots=1)
    assert 0.0039 <= pacer.rate[0] < 0.02  # not the cold op
    for _ in range(3):  # the work grows: the window follows it at the next settle
        with pacer.op(slot=0):
            _burn(0.012)
    pacer.settle(slots=1)
    assert pacer.rate[0] >= 0.0118


def test_a_slowed_rank_and_a_stall_do_not_raise_the_rate():
    stalled = [0.0]
    pacer = ComputePacer(cores=1.0, margin=1.0, warmup_rate=True, window=4,
                         stall_s=lambda: stalled[0])
    for _ in range(2):
        with pacer.op(slot=0):
            _burn(0.004)
    with pacer.op(slot=0):
        _burn(0.004)
        time.sleep(0.03)
        stalled[0] += 0.03  # a GC pause: on top of this op, not in the stage's rate
    with pacer.op(slot=0, device_factor=3.0):
        time.sleep(0.05)  # the injector's victim: its slowness is not its stage's rate
    pacer.settle(slots=1)
    assert 0.0039 <= pacer.rate[0] < 0.015


def test_one_rate_per_work_puts_every_stage_of_a_kind_at_the_largest_rate_per_work():
    # pp 3, forward then backward slots, rates per unit of work. Stage 1's warm-up read
    # 30 % slower than stage 0 (its CFS carry-in); the forward kind takes its rate.
    rate = [0.010, 0.013, 0.011, 0.020, 0.019, 0.026]
    out = one_rate_per_work(rate, pp=3)
    assert out[:3] == pytest.approx([0.013] * 3)
    assert out[3:] == pytest.approx([0.026] * 3)  # backward: its own, 0.026
    # every slot at or above its own measured rate: no stage runs past its target
    assert all(o >= r - 1e-12 for o, r in zip(out, rate, strict=True))


def test_one_rate_per_work_leaves_a_slot_nobody_timed_unset():
    out = one_rate_per_work([0.0, 0.01, 0.005, 0.02], pp=2)
    assert out == pytest.approx([0.0, 0.01, 0.02, 0.02])
    with pytest.raises(ValueError, match="pp"):
        one_rate_per_work([0.1, 0.2, 0.3], pp=2)


def test_settle_puts_this_ranks_stages_at_one_rate_per_unit_of_work():
    pacer = ComputePacer(cores=1.0, margin=1.0, warmup_rate=True)
    for slot, busy, work in ((0, 0.004, 1.0), (1, 0.008, 4.0)):
        for _ in range(3):
            with pacer.op(slot=slot, work=work):
                _burn(busy)
    pacer.settle(slots=2, pp=2)  # stage 0: 4 ms per unit of work, stage 1: 2 ms
    assert pacer.rate[0] == pytest.approx(pacer.rate[1]) and pacer.rate[0] >= 0.0039


def test_a_settled_op_lasts_its_work_times_the_rate():
    # Variable-length data: a microbatch with three times the modelled work (its
    # attention's sum(s^2)) lasts three times as long, whatever its CPU time.
    pacer = ComputePacer(cores=1.0, margin=1.0, warmup_rate=True)
    for _ in range(3):
        with pacer.op(slot=0, work=2.0):
            _burn(0.004)
    pacer.settle(slots=1, pp=1)
    per_work = pacer.rate[0]
    assert 0.0019 <= per_work < 0.01
    for work in (1.0, 3.0):
        wall0 = time.perf_counter()
        with pacer.op(slot=0, work=work):
            pass  # no CPU: the nominal target alone
        wall = time.perf_counter() - wall0
        assert wall >= per_work * work * 0.99
        assert wall < per_work * work + 0.03  # sleep overshoot, generous
