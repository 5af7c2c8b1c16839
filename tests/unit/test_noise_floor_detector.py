"""The detector noise floor: its file, its measurement with the detector's own rules, and
thresholds raised to it (stragglerlab/method/noise_floor.py, analysis/detectors/whatif_noise.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stragglerlab.analysis.detectors.whatif import WhatIfDetector
from stragglerlab.analysis.detectors.whatif_config import WhatIfDetectorConfig
from stragglerlab.analysis.detectors.whatif_noise import (
    CleanReading,
    floored_config,
    measure_floor,
    reading,
)
from stragglerlab.cli import main
from stragglerlab.method.noise_floor import (
    DEFAULT_NOISE_FLOOR,
    FamilyFloor,
    NoiseFloor,
    Spread,
    read_noise_floor,
    write_noise_floor,
)
from stragglerlab.run.findings import Finding, RootCause
from stragglerlab.trace.meta import JobMeta, LayoutFamily
from stragglerlab.util.errors import InputError
from stragglerlab.workloads.synthetic import SlowWorker


def _floor(**stats) -> NoiseFloor:
    return NoiseFloor(families={LayoutFamily.DP_PP: FamilyFloor(
        n_runs=3, layouts=("dp2-pp2",), statistics=stats,
        job_slowdown=Spread.of([1.02, 1.03, 1.05]))})


def test_file_round_trip_and_shipped_floor_reads(tmp_path):
    path = tmp_path / "noise-floor.yaml"
    write_noise_floor(path, _floor(link_step_share=0.041), header="measured here")
    back = read_noise_floor(path)
    fam = back.family(LayoutFamily.DP_PP)
    assert fam.statistics == {"link_step_share": 0.041} and fam.n_runs == 3
    assert fam.job_slowdown == Spread(min=1.02, median=1.03, max=1.05, n=3)
    assert back.family(LayoutFamily.PURE_PP) is None
    assert path.read_text().startswith("# measured here\n")
    shipped = read_noise_floor(DEFAULT_NOISE_FLOOR)  # the package's own file is valid
    assert set(shipped.families) == set(LayoutFamily)


@pytest.mark.parametrize("text, field", [
    ("schema: other/1\n", "schema"),
    ("schema: stragglerlab.noise-floor/1\nfamilies: {tp-only: {n_runs: 1}}\n", "tp-only"),
    ("schema: stragglerlab.noise-floor/1\nfamilies: {dp+pp: {n_runs: 0}}\n", "n_runs"),
    ("schema: stragglerlab.noise-floor/1\nfamilies: {dp+pp: {n_runs: 2, statistics: "
     "{link_step_share: -1}}}\n", "link_step_share"),
    ("schema: stragglerlab.noise-floor/1\nfamilies: {dp+pp: {n_runs: 2, job_slowdown: "
     "{min: 2, median: 1, max: 3, n: 2}}}\n", "job_slowdown"),
    ("[1, 2]\n", "noise-floor file"),
])
def test_a_bad_file_is_one_clear_error(tmp_path, text, field):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=field):
        read_noise_floor(path)


def test_reading_takes_the_rules_own_statistic():
    def f(**detail):
        return Finding([], 0, 3, RootCause.NET_THROTTLE, 0.5, detail=detail)

    found = [f(step_share=0.02), f(step_share=0.05), f(compute_over_peers=1.3),
             f(shift_over_other_stages=1.4, shift_own=1.25),
             f(compute_ratio={"dp0-pp1": 1.12, "dp1-pp1": 1.3})]
    assert reading(found, "link_step_share") == 0.05
    # the device rule and the stage-shift rule (the lesser of its two readings) share a field
    assert reading(found, "device_compute_ratio") == 1.3
    assert reading(found[3:4], "device_compute_ratio") == 1.25
    assert reading(found, "compute_ratio") == 1.3
    assert reading(found, "ring_step_share") is None


def test_floored_config_raises_only_what_the_noise_reaches():
    cfg = WhatIfDetectorConfig()
    meta = JobMeta(dp_size=2, pp_size=2)
    floored, report = floored_config(cfg, _floor(link_step_share=0.041, ring_step_share=0.01),
                                     meta)
    assert floored.link_step_share > 0.041 and floored.link_step_share < 0.0411
    assert floored.ring_step_share == cfg.ring_step_share  # noise under the threshold
    assert set(report["raised"]) == {"link_step_share"} and report["n_runs"] == 3
    assert report["ignored"] == []
    # a statistic no rule of this version reads (a newer file's, a typo) is said, not used
    same, report = floored_config(cfg, _floor(link_step_shar=0.5), meta)
    assert same == cfg and report["ignored"] == ["link_step_shar"]
    from stragglerlab.cli.detect import floor_line

    assert "ignored link_step_shar (not a threshold of this detector" in floor_line(report)
    # a family without a floor keeps every threshold
    same, report = floored_config(cfg, _floor(link_step_share=0.5), JobMeta(dp_size=4, pp_size=1))
    assert same == cfg and not report["measured"] and report["family"] == "pure-dp"


def test_measure_floor_is_the_highest_reading_per_family():
    runs = [CleanReading(layout="dp2-pp2", statistics={"link_step_share": 0.02,
                                                       "ring_step_share": None},
                         job_slowdown=1.03, discrepancy=0.01),
            CleanReading(layout="dp2-pp4", statistics={"link_step_share": 0.035},
                         job_slowdown=1.06, discrepancy=0.02)]
    floor = measure_floor({LayoutFamily.DP_PP: runs})
    fam = floor.family(LayoutFamily.DP_PP)
    assert fam.statistics == {"link_step_share": 0.035}  # never-reached statistics stay out
    assert fam.layouts == ("dp2-pp2", "dp2-pp4") and fam.n_runs == 2
    assert fam.job_slowdown.max == 1.06 and fam.discrepancy.min == 0.01


def test_a_finding_under_the_floor_is_reported_apart_and_not_counted(whatif_run):
    run = whatif_run(dp_size=4, slow_workers=(SlowWorker(dp_rank=2, stage=1, factor=1.6),))
    found = WhatIfDetector(noise_floor=None).detect(run)
    assert [(r.dp_rank, r.stage) for f in found for r in f.ranks] == [(2, 1)]
    # A floor the slow device stands above changes nothing; one it does not, hides it.
    low = WhatIfDetector(noise_floor=_floor(device_compute_ratio=1.05, compute_ratio=1.05,
                                            worker_threshold=1.05))
    assert [f.root_cause for f in low.detect(run)] == [f.root_cause for f in found]
    high = {"device_compute_ratio": 4.0, "compute_ratio": 4.0, "worker_threshold": 4.0}
    det = WhatIfDetector(noise_floor=_floor(**high))
    assert det.detect(run) == []
    report = det.noise_report
    assert set(report["raised"]) == set(high)
    assert [(c["ranks"][0]["dp_rank"], c["ranks"][0]["stage"])
            for c in report["below_floor"]] == [(2, 1)]


def test_shipped_floor_applies_to_testbed_runs_only(whatif_run):
    run = whatif_run(dp_size=4)
    det = WhatIfDetector()  # the shipped floor
    det.detect(run)
    assert not det.noise_report["measured"]  # a synthetic trace: no run.json
    run.testbed = True
    det.detect(run)
    assert det.noise_report["measured"] and det.noise_report["family"] == "dp+pp"


def test_noise_floor_verb_measures_clean_runs_and_refuses_faulty_ones(whatif_run, tmp_path,
                                                                      capsys):
    clean = [whatif_run(dp_size=2, seed=s) for s in (1, 2)]
    out = tmp_path / "nf"
    assert main(["noise-floor", "--runs", *[r.path for r in clean], "--out", str(out),
                 "--quiet"]) == 0
    fam = read_noise_floor(out / "noise-floor.yaml").family(LayoutFamily.DP_PP)
    assert fam.n_runs == 2 and fam.job_slowdown.n == 2
    # detect with it writes the floor beside the findings
    assert main(["detect", "--run", clean[0].path, "--noise-floor",
                 str(out / "noise-floor.yaml"), "--out", str(tmp_path / "d"), "--quiet"]) == 0
    doc = json.loads((tmp_path / "d" / "whatif.json").read_text())
    assert doc["noise_floor"]["measured"] and doc["noise_floor"]["n_runs"] == 2
    faulty = whatif_run(dp_size=2)
    Path(faulty.path, "faults.json").write_text(json.dumps([{
        "kind": "slow-worker", "targets": [{"rank": 0, "dp_rank": 0, "stage": 0}],
        "first_step": 0, "last_step": None, "requested": {"factor": 2}, "measured": {}}]))
    capsys.readouterr()
    assert main(["noise-floor", "--runs", faulty.path, "--out", str(out)]) == 2
    assert "clean runs only" in capsys.readouterr().err


def _online_floor(run_stats: dict, online: dict[int, dict]) -> NoiseFloor:
    return NoiseFloor(families={LayoutFamily.DP_PP: FamilyFloor(
        n_runs=2, layouts=("dp2-pp2",), statistics=run_stats, online=online)})


def test_online_floor_round_trips_and_a_bad_window_key_is_one_clear_error(tmp_path):
    path = tmp_path / "noise-floor.yaml"
    write_noise_floor(path, _online_floor({"link_share": 0.02},
                                          {8: {"link_share": 0.04}, 12: {"link_share": 0.03}}))
    fam = read_noise_floor(path).family(LayoutFamily.DP_PP)
    assert fam.online == {8: {"link_share": 0.04}, 12: {"link_share": 0.03}}
    path.write_text("schema: stragglerlab.noise-floor/1\nfamilies: {dp+pp: {n_runs: 2, "
                    "online: {eight: {link_share: 0.1}}}}\n")
    with pytest.raises(InputError, match="online"):
        read_noise_floor(path)


def test_a_window_diagnosis_is_held_to_its_window_lengths_floor():
    cfg = WhatIfDetectorConfig()
    meta = JobMeta(dp_size=2, pp_size=2)
    floor = _online_floor({"link_share": 0.05, "device_compute_ratio": 1.05},
                          {8: {"link_share": 0.15, "worker_threshold": 1.3}})
    whole, report = floored_config(cfg, floor, meta)
    assert whole.link_share == cfg.link_share and report["window"] == "run"
    eight, report = floored_config(cfg, floor, meta, window_steps=8)
    assert eight.link_share > 0.15 and eight.worker_threshold > 1.3
    assert eight.device_compute_ratio == cfg.device_compute_ratio  # the run's 1.05 < 1.1
    assert report["window"] == "online (8 steps)"
    # A window length the floor was not read over: the floor of the longest measured
    # window no longer than it (noise grows as windows shorten, so that one is higher) ...
    twelve, report = floored_config(cfg, floor, meta, window_steps=12)
    assert twelve == eight and report["window"] == "online (8 steps) for a 12-step window"
    # ... and under the shortest measured, that one, named as the nearest there is.
    six, report = floored_config(cfg, floor, meta, window_steps=6)
    assert six == eight and "none that short was measured" in report["window"]
    # Offline, or with no online floor at all: the whole run's floor.
    bare = _online_floor({"link_share": 0.05}, {})
    assert floored_config(cfg, bare, meta, window_steps=8)[1]["window"] == "run"


def test_measure_floor_reads_online_windows_every_run_was_read_over():
    runs = [CleanReading(layout="dp2-pp2", statistics={"link_share": 0.02},
                         online={8: {"link_share": 0.05}, 12: {"link_share": 0.03}}),
            CleanReading(layout="dp2-pp4", statistics={"link_share": 0.03},
                         online={8: {"link_share": 0.04, "worker_threshold": 1.2}})]
    fam = measure_floor({LayoutFamily.DP_PP: runs}).family(LayoutFamily.DP_PP)
    assert fam.online == {8: {"link_share": 0.05, "worker_threshold": 1.2}}


def test_clean_reading_reads_every_online_window(whatif_run):
    run = whatif_run(dp_size=2, seed=3)
    det = WhatIfDetector(noise_floor=None)
    steps = sorted(run.trace["step"].unique())
    windows = det._windows(run, 8)
    # the windows an online replay diagnoses: from min_steps steps on, the latest 8 at most
    assert len(windows) == len(steps) - det.config.min_steps + 1
    assert [sorted(w.trace["step"].unique()) for w in windows[-2:]] == \
        [steps[-9:-1], steps[-8:]]
    assert len(windows[0].trace["step"].unique()) == det.config.min_steps
    got = det.clean_reading(run)
    assert set(got.online) == {4, 6, 8, 12}
    assert set(got.online[8]) == set(got.statistics)  # every threshold read per window too


def _per_step_floor() -> NoiseFloor:
    # Clean runs of 0.9 s steps: a rank's comm excess up to 0.03 of the step (27 ms), in
    # 8-step windows up to 0.04 (36 ms).
    return NoiseFloor(families={LayoutFamily.DP_PP: FamilyFloor(
        n_runs=3, layouts=("dp2-pp2",), runs_by_layout={"dp2-pp2": 3},
        statistics={"link_share": 0.03},
        online={8: {"link_share": 0.04, "worker_threshold": 1.2}},
        per_step_s={"dp2-pp2": {"link_share": 0.027}},
        online_per_step_s={"dp2-pp2": {8: {"link_share": 0.036}}})})


def test_a_share_of_the_step_is_held_to_the_floors_seconds_per_step_over_its_own_steps():
    cfg, meta, floor = WhatIfDetectorConfig(), JobMeta(dp_size=2, pp_size=2), _per_step_floor()
    # Steps as long as the floor's: the share floor (0.03) stands, under the configured 0.1.
    same, report = floored_config(cfg, floor, meta, step_s=0.9)
    assert same == cfg and report["raised"] == {} and report["per_step"] == []
    # Steps of 0.2 s: the same 27 ms of jitter is 0.135 of each, above the configured 0.1.
    short, report = floored_config(cfg, floor, meta, step_s=0.2)
    assert short.link_share == pytest.approx(0.027 / 0.2, rel=1e-5)
    assert report["raised"]["link_share"]["floor"] == pytest.approx(0.135)
    assert report["per_step"] == ["link_share"] and report["step_s"] == 0.2
    # A window is held to its own window length's seconds (36 ms / 0.3 s = 0.12).
    window, _ = floored_config(cfg, floor, meta, window_steps=8, step_s=0.3)
    assert window.link_share == pytest.approx(0.12, rel=1e-5)
    assert window.worker_threshold > 1.2  # the share floors of the window still apply
    # A ratio statistic is not a time: never scaled by the step.
    assert floored_config(cfg, floor, meta, window_steps=8, step_s=0.01)[0] \
        .worker_threshold == window.worker_threshold
    # Without the run's step time, for a layout with no clean run (seconds per step do not
    # carry across layouts), or a floor written before per-step readings: shares only.
    assert floored_config(cfg, floor, meta)[0] == cfg
    assert floored_config(cfg, floor, JobMeta(dp_size=2, pp_size=4), step_s=0.2)[0] == cfg
    old = NoiseFloor(families={LayoutFamily.DP_PP: FamilyFloor(
        n_runs=3, layouts=("dp2-pp2",), statistics={"link_share": 0.03})})
    assert floored_config(cfg, old, meta, step_s=0.2)[0] == cfg


def test_per_step_floor_round_trips_and_bad_values_are_one_clear_error(tmp_path):
    path = tmp_path / "noise-floor.yaml"
    write_noise_floor(path, _per_step_floor())
    fam = read_noise_floor(path).family(LayoutFamily.DP_PP)
    assert fam.per_step_s == {"dp2-pp2": {"link_share": 0.027}}
    assert fam.runs_by_layout == {"dp2-pp2": 3}
    assert fam.online_per_step_s == {"dp2-pp2": {8: {"link_share": 0.036}}}
    for bad, where in (("per_step_s: {dp2-pp2: {link_share: -0.1}}",
                        "per_step_s.dp2-pp2.link_share"),
                       ("per_step_s: [1]", "per_step_s"),
                       ("per_step_s: {dp2-pp2: 0.1}", "per_step_s.dp2-pp2"),
                       ("online_per_step_s: {dp2-pp2: {eight: {link_share: 0.1}}}",
                        "online_per_step_s.dp2-pp2"),
                       ("online_per_step_s: {dp2-pp2: {8: {link_share: fast}}}",
                        "online_per_step_s.dp2-pp2.8.link_share"),
                       ("runs_by_layout: {dp2-pp2: 0}", "runs_by_layout.dp2-pp2"),
                       ("runs_by_layout: [dp2-pp2]", "runs_by_layout")):
        path.write_text("schema: stragglerlab.noise-floor/1\nfamilies:\n  dp+pp:\n"
                        f"    n_runs: 2\n    {bad}\n")
        with pytest.raises(InputError, match=where.replace(".", r"\.")):
            read_noise_floor(path)


def test_measure_floor_keeps_the_highest_seconds_per_step_per_layout_not_older_readings():
    new = [CleanReading(layout="dp2-pp2", statistics={"link_share": 0.02},
                        per_step_s={"link_share": 0.018}, online={8: {"link_share": 0.04}},
                        online_per_step_s={8: {"link_share": 0.03}}),
           CleanReading(layout="dp2-pp2", statistics={"link_share": 0.03},
                        per_step_s={"link_share": 0.012, "gc_min_share": 0.001},
                        online={8: {"link_share": 0.05}},
                        online_per_step_s={8: {"link_share": 0.02}}),
           CleanReading(layout="dp4-pp4", statistics={"link_share": 0.03},
                        per_step_s={"link_share": 0.5}, online={8: {"link_share": 0.05}},
                        online_per_step_s={8: {"link_share": 0.7}})]
    fam = measure_floor({LayoutFamily.DP_PP: new}).family(LayoutFamily.DP_PP)
    # how many runs each layout's maximum is over
    assert fam.runs_by_layout == {"dp2-pp2": 2, "dp4-pp4": 1} and fam.n_runs == 3
    assert floored_config(WhatIfDetectorConfig(), NoiseFloor(families={
        LayoutFamily.DP_PP: fam}), JobMeta(dp_size=2, pp_size=2), step_s=0.1)[1][
        "layout_runs"] == 2
    assert fam.per_step_s == {"dp2-pp2": {"link_share": 0.018, "gc_min_share": 0.001},
                              "dp4-pp4": {"link_share": 0.5}}
    assert fam.online_per_step_s == {"dp2-pp2": {8: {"link_share": 0.03}},
                                     "dp4-pp4": {8: {"link_share": 0.7}}}
    # A reading from before per-step readings: its layout has none (not a partial max).
    older = [*new, CleanReading(layout="dp2-pp2", statistics={"link_share": 0.01},
                                online={8: {"link_share": 0.01}})]
    fam = measure_floor({LayoutFamily.DP_PP: older}).family(LayoutFamily.DP_PP)
    assert set(fam.per_step_s) == set(fam.online_per_step_s) == {"dp4-pp4"}


def test_clean_reading_reads_time_statistics_in_seconds_per_step(whatif_run):
    from stragglerlab.analysis.detectors.signatures import mean_step_time
    from stragglerlab.analysis.detectors.whatif_noise import PER_STEP

    run = whatif_run(dp_size=2, seed=3)
    got = WhatIfDetector(noise_floor=None).clean_reading(run)
    assert set(got.per_step_s) == set(PER_STEP) and set(got.online_per_step_s[8]) == set(PER_STEP)
    read = [k for k in PER_STEP if got.statistics[k] is not None]
    assert read, "a clean run reads some comm noise"
    for k in read:  # the whole run: its share times its own mean step time
        assert got.per_step_s[k] == pytest.approx(got.statistics[k] * mean_step_time(run.trace))
    for k in PER_STEP:  # read in seconds exactly where read as a share
        assert (got.per_step_s[k] is None) == (got.statistics[k] is None)
        assert (got.online_per_step_s[4][k] is None) == (got.online[4][k] is None)
