"""The reproduction gate (stragglerlab.run.validity), the step definition the discrepancy uses,
and the known-answer GPU traces of benchmarks/kineto_gpu_synth.py through the general path."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from stragglerlab.run.validity import MAX_DISCREPANCY, Finding, Reason, judge
from tests.unit.bench_modules import load_benchmark

synth = load_benchmark("kineto_gpu_synth")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "slow-worker"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stragglerlab", *args], capture_output=True,
                          text=True)


def test_within_the_cut_is_a_verdict_beyond_it_is_none():
    ok = judge(0.049)
    assert ok.valid and ok.verdict(1.2) is True and ok.verdict(1.05) is False
    for d in (0.051, -0.06, math.nan):
        v = judge(d)
        assert not v.valid and v.verdict(1.5) is None and v.reasons == ["discrepancy"]
        assert "NO VERDICT" in v.banner()
    assert judge(MAX_DISCREPANCY).valid  # the paper's cut is inclusive


def test_a_gating_finding_withholds_the_verdict_and_force_marks_it():
    f = Finding(reason=Reason.LAUNCH_BOUND, detail="launch-bound: busy 9%", gates=True)
    v = judge(0.0, [f, Finding(reason=Reason.ENTRY_SKEW, detail="skew 7 ms")])
    assert not v.valid and v.verdict(1.3) is None
    assert v.reasons == ["launch-bound", "step-entry-skew"]
    forced = judge(0.0, [f], force=True)
    assert forced.forced and forced.verdict(1.3) is True and "FORCED" in forced.banner()
    caveat = judge(0.01, [Finding(reason=Reason.ENTRY_SKEW, detail="skew 7 ms")])
    assert caveat.valid and caveat.reasons == [] and caveat.detail == ["caveat: skew 7 ms"]
    assert judge(0.0, force=True).forced is False  # nothing to force


@pytest.mark.parametrize("kind", sorted(synth.KINDS))
def test_known_answer_gpu_traces(kind, tmp_path):
    """Every kind: S within 2 % of the host-device answer, the gate's outcome and reason,
    the part (host or device) the slowdown belongs to, and the victims ranked first. Where
    the host cannot be modelled (no launches traced), a launch-bound job is gated: its
    chain model's S is not the job's."""
    case = synth.KINDS[kind]
    want = synth.host_device_ideal(case)
    traces = synth.write_job(kind, tmp_path / "traces")
    out = tmp_path / "out"
    proc = run_cli("import", "kineto", "--traces", str(traces), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    wi = json.loads((out / "whatif.json").read_text())
    if not case.gated:
        assert wi["S"] == pytest.approx(want["S"], rel=0.02)
    else:  # the numbers are the chain model's, and differ from the job's answer
        assert wi["S"] == pytest.approx(synth.analytic(case)["S"], rel=0.02)
        assert abs(wi["S"] - want["S"]) > 0.05
    assert abs(wi["discrepancy"]) < 0.01  # the traced step, measured as T is
    v = wi["validity"]
    assert v["valid"] is (not case.gated)
    assert wi["host_model"] is (not case.drop_launches)  # launches and waits traced
    again = run_cli("whatif", "--run", str(out))  # the op table read back: the same model
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "whatif.json").read_text())["S"] == pytest.approx(wi["S"])
    if case.gated:
        assert case.reason in v["reasons"] and wi["straggling"] is None
        assert "no verdict" in proc.stdout and "NO VERDICT" in proc.stdout
    else:
        assert wi["straggling"] is (want["S"] >= 1.1)
    parts = wi["by_segment_part"]
    if case.part:
        other = "device" if case.part == "host" else "host"
        assert parts[case.part] > 1.05 and parts[other] < 1.01
    else:
        assert max(parts.values()) < 1.01
    if case.victims:
        top = sorted(wi["by_rank"], key=lambda r: -wi["by_rank"][r])
        assert [int(r) for r in top[:len(case.victims)]] == list(case.victims)
    rc = wi["regime_change"]
    if case.regime_step is None:
        assert rc is None
    else:  # a link every member waits on: seen over time, named with its kind and step
        assert rc["step"] == case.regime_step
        assert rc["kinds"]["all_reduce"] > 10 and rc["every_rank"]["all_reduce"]
        assert any(n.startswith(f"regime change at step {case.regime_step}")
                   for n in wi["notes"])


def test_a_job_wide_change_is_named_on_the_vocabulary_path(tmp_path):
    """Every worker 4x slower from step 5: no straggler, a regime change on every rank."""
    run = tmp_path / "jw"
    slow = [a for d in (0, 1) for p in (0, 1) for a in ("--slow", f"{d},{p},4,5")]
    assert run_cli("synth", "--out", str(run), "--dp", "2", "--pp", "2", "--steps", "8",
                   "--quiet", *slow).returncode == 0
    proc = run_cli("whatif", "--run", str(run))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((run / "whatif" / "whatif.json").read_text())
    rc = doc["regime_change"]
    assert rc["step"] == 5 and rc["ratio"] > 3
    assert rc["every_rank"]["forward-compute"] and rc["kinds"]["forward-compute"] > 3
    assert "regime change at step 5" in proc.stdout
    clean = tmp_path / "clean"
    assert run_cli("synth", "--out", str(clean), "--quiet").returncode == 0
    assert run_cli("whatif", "--run", str(clean)).returncode == 0
    assert json.loads((clean / "whatif" / "whatif.json").read_text())["regime_change"] is None


def test_step_entry_skew_is_reported_and_not_a_discrepancy(tmp_path):
    traces = synth.write_job("entry-skew", tmp_path / "traces")
    out = tmp_path / "out"
    proc = run_cli("import", "kineto", "--traces", str(traces), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    wi = json.loads((out / "whatif.json").read_text())
    skew = synth.KINDS["entry-skew"].entry_skew_us
    for r, us in skew.items():
        assert wi["entry_skew_s"][str(r)] == pytest.approx(us / 1e6, abs=1e-6)
    assert wi["entry_skew_s"]["1"] == pytest.approx(0.0, abs=1e-9)
    assert abs(wi["discrepancy"]) < 1e-3  # measured from the last rank's start
    assert any("step-entry skew: rank 0" in d for d in wi["validity"]["detail"])
    assert "step-entry skew" in proc.stdout


def test_force_asserts_the_verdict_marked(tmp_path):
    traces = synth.write_job("launch-bound-no-launches", tmp_path / "traces")
    out = tmp_path / "out"
    assert run_cli("import", "kineto", "--traces", str(traces), "--out", str(out)).returncode == 0
    forced = run_cli("whatif", "--run", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    wi = json.loads((out / "whatif.json").read_text())
    assert wi["straggling"] is True and wi["validity"]["forced"] is True
    assert "FORCED" in forced.stdout
    again = run_cli("whatif", "--run", str(out))
    assert again.returncode == 0 and json.loads((out / "whatif.json").read_text())[
        "straggling"] is None


def test_the_picture_of_a_gated_result_carries_the_banner(tmp_path):
    traces = synth.write_job("launch-bound-no-launches", tmp_path / "traces")
    out = tmp_path / "out"
    assert run_cli("import", "kineto", "--traces", str(traces), "--out", str(out)).returncode == 0
    proc = run_cli("plot", "--run", str(out), "--out", str(tmp_path / "plot"))
    assert proc.returncode == 0, proc.stderr
    side = json.loads((tmp_path / "plot" / "heatmap.json").read_text())
    assert side["validity"]["valid"] is False and "launch-bound" in side["validity"]["reasons"]


def test_the_vocabulary_path_records_its_gate(tmp_path):
    """A testbed trace: validity in whatif.json, its discrepancy the file's own."""
    out = tmp_path / "wi"
    proc = run_cli("whatif", "--run", str(EXAMPLE), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "whatif.json").read_text())
    v = doc["validity"]
    assert v["discrepancy"] == pytest.approx(doc["simulation_discrepancy"] - 1.0)
    assert v["valid"] is (abs(v["discrepancy"]) <= MAX_DISCREPANCY)
    assert doc["straggling"] is (doc["slowdown"] >= 1.1 if v["valid"] else None)


def test_regime_change_is_sustained_and_beyond_the_noise():
    from stragglerlab.analysis.regime import regime_change

    steps = list(range(1, 9))
    assert regime_change(steps, [1.0, 1.02, 0.99, 1.01, 3.0, 3.1, 2.9, 3.0]).step == 5
    assert regime_change(steps, [1.0, 1.02, 0.99, 5.0, 1.0, 1.01, 0.98, 1.0]) is None  # outlier
    assert regime_change(steps, [1.0, 1.02, 0.99, 1.01, 1.3, 1.31, 1.29, 1.3]) is None  # < 1.5x
    assert regime_change(steps, [3.0, 3.1, 1.0, 1.0, 1.01, 0.99, 1.0, 1.02]).step == 3  # faster
    assert regime_change([1, 2, 3], [1.0, 5.0, 5.0]) is None  # too few steps a side


@pytest.mark.parametrize("workload", ["torch-ddp", "torch-fsdp", "torch-pipelining"])
def test_detect_whatif_on_an_unannotated_torch_workload(workload, tmp_path):
    """The torch workloads' traces (no annotations; one slow rank from a known step): the
    `whatif` detector names the victim, its cause and its window; the detectors that read
    the op-level trace say so."""
    example = EXAMPLE.parent / workload
    truth = json.loads((example / "faults.json").read_text())[0]
    out = tmp_path / "imp"
    assert run_cli("import", "kineto", "--traces", str(example / "kineto"),
                   "--out", str(out)).returncode == 0
    proc = run_cli("detect", "--run", str(out), "--detector", "whatif")
    assert proc.returncode == 0, proc.stderr
    (f,) = json.loads((out / "detect" / "whatif.json").read_text())["findings"]
    assert [r["rank"] for r in f["ranks"]] == [t["rank"] for t in truth["targets"]]
    assert f["root_cause"] == truth["kind"] and f["first_step"] == truth["first_step"]
    refused = run_cli("detect", "--run", str(out), "--detector", "rank-score")
    assert refused.returncode == 2 and "op vocabulary" in refused.stderr


@pytest.mark.parametrize("kind", ["device-bound", "launch-bound", "launch-bound-no-launches",
                                  "device-slow"])
def test_detect_whatif_on_known_answer_gpu_traces(kind, tmp_path):
    """Nothing on a clean job or a gated one; the victim on a straggling one."""
    case = synth.KINDS[kind]
    out = tmp_path / "imp"
    traces = synth.write_job(kind, tmp_path / "traces")
    assert run_cli("import", "kineto", "--traces", str(traces), "--out", str(out)).returncode == 0
    assert run_cli("detect", "--run", str(out), "--detector", "whatif").returncode == 0
    found = json.loads((out / "detect" / "whatif.json").read_text())["findings"]
    want = list(case.victims) if not case.gated else []
    assert [r["rank"] for f in found for r in f["ranks"]] == want
