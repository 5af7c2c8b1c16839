"""The 1F1B pipeline schedule (workloads.schedule): completeness, order, memory, P2P, deadlock."""

from __future__ import annotations

import pytest

from stragglerlab.workloads.schedule import Action, ActionKind, Direction, one_f_one_b, warmup_count

K = ActionKind
SHAPES = [(pp, mb) for pp in range(1, 7) for mb in range(1, 11)]


def _schedules(pp: int, n_mb: int) -> list[list[Action]]:
    return [one_f_one_b(s, pp, n_mb) for s in range(pp)]


def _run_blocking(schedules: list[list[Action]]) -> bool:
    """Replay with blocking P2P: an action ends once every one of its halves met its peer.

    A half meets its peer when the peer stage's current action holds the
    complementary half (same direction and microbatch, other side). Returns
    False on deadlock (no stage can move), True when every stage finishes.
    """
    pos = [0] * len(schedules)
    met: set[tuple[int, int, int]] = set()  # (stage, action index, half index)
    while any(p < len(s) for p, s in zip(pos, schedules)):
        moved = False
        for s, actions in enumerate(schedules):
            if pos[s] >= len(actions):
                continue
            a = actions[pos[s]]
            for i, h in enumerate(a.halves):
                peer = h.peer_stage(s)
                assert 0 <= peer < len(schedules), f"stage {s} {a} crosses the pipeline end"
                if (s, pos[s], i) in met or pos[peer] >= len(schedules[peer]):
                    continue
                for j, ph in enumerate(schedules[peer][pos[peer]].halves):
                    if (ph.direction, ph.microbatch) == (h.direction, h.microbatch) \
                            and ph.is_send != h.is_send and ph.peer_stage(peer) == s:
                        met.update({(s, pos[s], i), (peer, pos[peer], j)})
            if all((s, pos[s], i) in met for i in range(len(a.halves))):
                pos[s] += 1
                moved = True
        if not moved:
            return False
    return True


def test_stage1_of_pp4_matches_the_reference_trace_order():
    got = [(a.kind, a.microbatch, a.recv_microbatch) for a in one_f_one_b(1, 4, 4)]
    assert got == [
        (K.RECV_FORWARD, 0, -1), (K.FORWARD, 0, -1), (K.SEND_FORWARD, 0, -1),
        (K.RECV_FORWARD, 1, -1), (K.FORWARD, 1, -1), (K.SEND_FORWARD, 1, -1),
        (K.RECV_FORWARD, 2, -1), (K.FORWARD, 2, -1), (K.SEND_FORWARD_RECV_BACKWARD, 2, 0),
        (K.BACKWARD, 0, -1), (K.SEND_BACKWARD_RECV_FORWARD, 0, 3), (K.FORWARD, 3, -1),
        (K.SEND_FORWARD_RECV_BACKWARD, 3, 1), (K.BACKWARD, 1, -1), (K.SEND_BACKWARD, 1, -1),
        (K.RECV_BACKWARD, 2, -1), (K.BACKWARD, 2, -1), (K.SEND_BACKWARD, 2, -1),
        (K.RECV_BACKWARD, 3, -1), (K.BACKWARD, 3, -1), (K.SEND_BACKWARD, 3, -1),
    ]


def test_last_stage_alternates_and_first_stage_warms_up():
    last = [a.kind for a in one_f_one_b(3, 4, 2)]
    assert last == [K.RECV_FORWARD, K.FORWARD, K.BACKWARD, K.SEND_BACKWARD_RECV_FORWARD,
                    K.FORWARD, K.BACKWARD, K.SEND_BACKWARD]
    first = [a.kind for a in one_f_one_b(0, 4, 2)]  # warmup capped at n_microbatches
    assert first == [K.FORWARD, K.SEND_FORWARD, K.FORWARD, K.SEND_FORWARD,
                     K.RECV_BACKWARD, K.BACKWARD, K.RECV_BACKWARD, K.BACKWARD]
    assert [warmup_count(s, 4, 8) for s in range(4)] == [3, 2, 1, 0]


@pytest.mark.parametrize(("pp", "n_mb"), SHAPES)
def test_each_microbatch_forward_then_backward_once(pp, n_mb):
    for stage, actions in enumerate(_schedules(pp, n_mb)):
        fwd = [i for i, a in enumerate(actions) if a.kind is K.FORWARD]
        bwd = [i for i, a in enumerate(actions) if a.kind is K.BACKWARD]
        assert [actions[i].microbatch for i in fwd] == list(range(n_mb))
        assert [actions[i].microbatch for i in bwd] == list(range(n_mb))
        assert all(f < b for f, b in zip(fwd, bwd)), f"stage {stage}: a backward before its fwd"


@pytest.mark.parametrize(("pp", "n_mb"), SHAPES)
def test_in_flight_microbatches_bounded(pp, n_mb):
    for stage, actions in enumerate(_schedules(pp, n_mb)):
        in_flight, peak = 0, 0
        for a in actions:
            in_flight += {K.FORWARD: 1, K.BACKWARD: -1}.get(a.kind, 0)
            peak = max(peak, in_flight)
        assert in_flight == 0
        assert peak <= pp - stage
        assert peak == min(pp - stage, n_mb)


@pytest.mark.parametrize(("pp", "n_mb"), SHAPES)
def test_sends_match_recvs_between_adjacent_stages(pp, n_mb):
    schedules = _schedules(pp, n_mb)
    for stage, actions in enumerate(schedules):
        halves = [h for a in actions for h in a.halves]
        for direction in Direction:
            for is_send in (True, False):
                mbs = [h.microbatch for h in halves
                       if h.direction is direction and h.is_send is is_send]
                peer = (stage + 1) if (direction is Direction.FORWARD) == is_send else stage - 1
                expected = list(range(n_mb)) if 0 <= peer < pp else []
                assert mbs == expected, (stage, direction, is_send)
    # A combined op's halves always talk to the same peer stage.
    for stage, actions in enumerate(schedules):
        for a in actions:
            assert len({h.peer_stage(stage) for h in a.halves}) <= 1


@pytest.mark.parametrize(("pp", "n_mb"), SHAPES)
def test_blocking_p2p_never_deadlocks(pp, n_mb):
    assert _run_blocking(_schedules(pp, n_mb))


def test_deadlock_checker_detects_a_broken_schedule():
    # Both stages wait to receive before they send: a classic P2P deadlock.
    broken = [
        [Action(K.FORWARD, 0), Action(K.RECV_BACKWARD, 0), Action(K.SEND_FORWARD, 0)],
        [Action(K.RECV_FORWARD, 0), Action(K.SEND_BACKWARD, 0), Action(K.BACKWARD, 0)],
    ]
    assert not _run_blocking(broken)
    # The same ops with stage 0 sending first complete.
    fixed = [broken[0][:1] + broken[0][2:] + broken[0][1:2], broken[1]]
    assert _run_blocking(fixed)


def test_ends_of_the_pipeline_hold_no_outward_p2p():
    pp = 5
    for a in one_f_one_b(0, pp, 6):
        assert all(h.peer_stage(0) == 1 for h in a.halves)
    for a in one_f_one_b(pp - 1, pp, 6):
        assert all(h.peer_stage(pp - 1) == pp - 2 for h in a.halves)
    assert [a.kind for a in one_f_one_b(0, 1, 2)] == [K.FORWARD, K.BACKWARD] * 2


@pytest.mark.parametrize(("stage", "pp", "n_mb"), [(0, 0, 1), (0, 2, 0), (2, 2, 1), (-1, 2, 1)])
def test_bad_arguments_raise(stage, pp, n_mb):
    with pytest.raises(ValueError):
        one_f_one_b(stage, pp, n_mb)
