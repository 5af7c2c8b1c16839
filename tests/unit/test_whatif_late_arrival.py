"""The `whatif` detector's late-arrival rule (whatif_rules/late_arrival.py): a DP rank that
reaches its collectives late with nothing traced for it, read off the launch attribution.

The end-to-end case takes a real pure-DP testbed trace (tests/data/testbed/pure-dp, DP 4,
5 traced steps) and makes one rank arrive late at its gradient collectives the way the
net-delay injector does: the rank waits before the collective (untraced), its peers wait
inside it for as long, and everything after starts that much later.
"""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from stragglerlab.analysis.detectors.whatif_arbitration import Entry, Settle
from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.analysis.detectors.whatif_rules import Board
from stragglerlab.analysis.detectors.whatif_rules.late_arrival import rule
from stragglerlab.cli import main
from stragglerlab.run.findings import Finding, RankRef, RootCause
from stragglerlab.run.whatif_record import WhatIfRecord
from stragglerlab.trace.trace_io import read_trace, write_trace
from tests.unit.conftest import DATA
from tests.unit.refdata import DIFFERENTIAL, differential_cases

PURE_DP = DATA / "testbed" / "pure-dp"
COLLECTIVE = "grads-reduce-scatter"


def late_arrival(df: pd.DataFrame, victim: int, steps: set[int], delay_s: float) -> pd.DataFrame:
    """The trace with DP rank `victim` arriving `delay_s` late at its gradient reduce-scatter
    in each of `steps`: the collective ends once the last rank has arrived and the transfer
    is done, so every rank's copy ends that much later when the victim arrives last, and
    everything after it starts later by as much."""
    out = df.copy()
    start = out["start_ts"].to_numpy(dtype=float, copy=True)
    duration = out["duration"].to_numpy(dtype=float, copy=True)
    step, rank = out["step"].to_numpy(), out["dp_rank"].to_numpy()
    coll = (out["optype"] == COLLECTIVE).to_numpy()
    carried = 0.0
    for t in sorted(set(step.tolist())):
        in_step = step == t
        start[in_step] += carried
        if t not in steps:
            continue
        c = in_step & coll
        end = start[c] + duration[c]
        s_max, e = start[c].max(), end.max()
        start[c & (rank == victim)] += delay_s
        e_new = e + max(0.0, start[c].max() - s_max)
        later = in_step & ~c & (start > s_max - 1e-12)
        start[later] += e_new - e
        duration[c] = e_new - start[c]
        carried += e_new - e
    out["start_ts"], out["duration"] = start, duration
    return out


def _analysed(tmp_path, df: pd.DataFrame, meta) -> str:
    run = tmp_path / "run"
    run.mkdir()
    write_trace(df, meta, run / "trace.parquet")
    shutil.copy(PURE_DP / "meta.yaml", run / "meta.yaml")
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0
    return str(run)


def _findings(tmp_path, run: str) -> list[dict]:
    out = tmp_path / "findings"
    assert main(["detect", "--run", run, "--detector", "whatif", "--out", str(out),
                 "--quiet"]) == 0
    doc = json.loads((out / "whatif.json").read_text())
    return doc["findings"] if isinstance(doc, dict) else doc


def test_a_rank_arriving_late_is_named_net_delay_over_its_steps(tmp_path):
    df, meta = read_trace(PURE_DP / "trace.parquet", PURE_DP / "meta.yaml")
    run = _analysed(tmp_path, late_arrival(df, victim=2, steps={2, 3, 4, 5}, delay_s=0.06),
                    meta)
    record = WhatIfRecord.read(f"{run}/whatif/whatif.json")
    assert record.launch_by_dp_rank is not None and record.launch_by_dp_rank.shape == (4, 5)
    # The victim's restored delays cost its late steps; the others' stay near 1.
    assert record.launch_by_dp_rank[2, 1:].min() > record.launch_by_dp_rank[[0, 1, 3], 1:].max()
    late = [f for f in _findings(tmp_path, run) if f["root_cause"] == "net-delay"]
    assert [(r["dp_rank"], r["stage"]) for f in late for r in f["ranks"]] == [(2, 0)]
    assert 2 <= late[0]["first_step"] and late[0]["last_step"] == 5
    assert late[0]["detail"]["late_arrival_ratio"] >= WhatIfDetectorConfig().late_arrival_ratio


def test_the_same_trace_without_the_delay_has_no_late_arrival(tmp_path):
    df, meta = read_trace(PURE_DP / "trace.parquet", PURE_DP / "meta.yaml")
    run = _analysed(tmp_path, df, meta)
    assert not [f for f in _findings(tmp_path, run) if f["root_cause"] == "net-delay"]


def _signals(launch_dp, launch_stage=None, dp=4, pp=1, ratio=1.05):
    steps = np.arange(8) + 10
    run = SimpleNamespace(meta=SimpleNamespace(dp_size=dp, pp_size=pp),
                          worker=lambda d, p: RankRef(rank=p * dp + d, dp_rank=d, stage=p))
    evidence = SimpleNamespace(launch_by_dp_rank=launch_dp, launch_by_stage=launch_stage)
    return SimpleNamespace(config=WhatIfDetectorConfig(late_arrival_ratio=ratio), run=run,
                           steps=steps, evidence=evidence)


def test_the_window_is_the_held_steps_and_the_stage_the_one_standing_out():
    launch = np.full((2, 8), 1.01)
    launch[1, 3:7] = 1.09  # DP rank 1 late over steps 13-16
    stage = np.full((3, 8), 1.01)
    stage[2, 3:7] = 1.08
    (f,) = rule(_signals(launch, stage, dp=2, pp=3), Board())
    assert f.root_cause is RootCause.NET_DELAY
    assert [(r.dp_rank, r.stage) for r in f.ranks] == [(1, 2)]
    assert (f.first_step, f.last_step) == (13, 16)
    assert f.estimated_slowdown == pytest.approx(1.09)


def test_no_finding_when_every_rank_is_as_late_too_short_no_table_or_already_named():
    everyone = np.full((4, 8), 1.2)  # job-wide untraced time is not one rank arriving late
    assert rule(_signals(everyone), Board()) == []
    short = np.full((4, 8), 1.0)
    short[0, 2:4] = 1.3  # two steps: under min_steps
    assert rule(_signals(short), Board()) == []
    assert rule(_signals(None), Board()) == []
    late = np.full((4, 8), 1.0)
    late[3, 1:6] = 1.2
    named = Finding([RankRef(rank=3, dp_rank=3, stage=0)], 10, 17, RootCause.SLOW_WORKER,
                    confidence=0.9, estimated_slowdown=1.2)
    assert rule(_signals(late), Board(findings=[named])) != []  # the rule names it...
    # ...and the arbitration leaves a named worker to its finding (the rule's EXCLUDES)
    entry = Entry(rule="late_arrival", settle=Settle.ADD)
    assert entry.candidates(_signals(late), Board(findings=[named])) == []
    assert entry.candidates(_signals(late), Board()) != []
    assert len(rule(_signals(late), Board())) == 1


UNPACED = differential_cases()


@pytest.mark.parametrize("case", UNPACED)
def test_no_late_arrival_on_the_unpaced_testbed_traces(tmp_path, case):
    """The eight unpaced traces of tests/data/differential (none with a net delay) are part
    of the noise `late_arrival_ratio` was set over: its default names none of them."""
    run = tmp_path / case
    run.mkdir()
    for name in ("trace.parquet", "meta.yaml"):
        shutil.copy(DIFFERENTIAL / case / name, run / name)
    assert main(["whatif", "--run", str(run), "--quiet"]) == 0
    assert not [f for f in _findings(tmp_path, str(run)) if f["root_cause"] == "net-delay"]
