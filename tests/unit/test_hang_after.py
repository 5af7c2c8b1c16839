"""When the launcher calls a run without progress hung: never before a slow step could end."""

from __future__ import annotations

from stragglerlab.scenarios.scenario import load_scenario
from stragglerlab.workloads.rank_actors import hang_after_s


def test_a_run_is_not_called_hung_before_its_slowest_step_could_end():
    clean = load_scenario("clean-dp2-pp2")
    base = clean.run.collective_timeout_s + 30.0
    assert hang_after_s(clean, 0.0) == base  # before any step: the collective timeout's
    assert hang_after_s(clean, 1.5) == base  # short steps: still the collective timeout's
    assert hang_after_s(clean, 60.0) == 120.0  # two of its longest steps
    level3 = load_scenario("slow-worker-3")  # a 2.36x victim: its steps grow by that much
    assert hang_after_s(level3, 45.0) == 2 * 45.0 * 2.36
