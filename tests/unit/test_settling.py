"""Leading steps still settling are detected and reported (analysis/settling.py)."""

from __future__ import annotations

import numpy as np

from stragglerlab.analysis.settling import settling_note, settling_steps
from stragglerlab.analysis.whatif import analyze
from stragglerlab.workloads.synthetic import SlowWorker, SyntheticConfig, synthesize_trace


def test_a_long_first_step_is_settling_and_a_quiet_run_is_not():
    rng = np.random.default_rng(0)
    quiet = 11.0 * (1 + 0.01 * rng.standard_normal(12))
    assert settling_steps(range(2, 14), quiet) == []
    assert settling_steps(range(2, 14), [15.98, 13.0, *quiet[2:]]) == [2, 3]
    # a long step later on is no settling; neither is a run too short to judge
    assert settling_steps(range(12), [*quiet[:5], 16.0, *quiet[6:]]) == []
    assert settling_steps(range(4), [16.0, 11, 11, 11]) == []
    # at most a third of the steps, however many are long
    assert len(settling_steps(range(9), [20.0] * 6 + [10.0] * 3)) == 3


def test_the_whatif_result_notes_settling_steps():
    df, meta = synthesize_trace(SyntheticConfig(dp_size=2, pp_size=2, n_steps=10))
    assert analyze(df, meta, where="x").notes == []
    # every worker slow in step 0 only: the whole first step runs long
    first = tuple(SlowWorker(d, p, 1.8, first_step=0, last_step=0)
                  for d in range(2) for p in range(2))
    df, meta = synthesize_trace(SyntheticConfig(dp_size=2, pp_size=2, n_steps=10,
                                                slow_workers=first))
    notes = analyze(df, meta, where="x").notes
    assert len(notes) == 1 and "step(s) 0 still settling" in notes[0]
    assert settling_note([0, 1], [1.0, 1.0]) is None
