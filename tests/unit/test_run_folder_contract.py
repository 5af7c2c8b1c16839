"""The run-folder contract (stragglerlab.run.run_folder): round trips, old files, bad files.

tests/data/run_folder_v0 is a hand-built run folder in the format written
before schema versions and the one root-cause vocabulary (no `schema` keys,
findings labelled `worker` / `sequence-imbalance`): it must keep loading.
Every bad file raises exactly one InputError naming the file (and the field).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stragglerlab.run.findings import (
    FINDINGS_SCHEMA,
    Finding,
    FindingsDocument,
    RankRef,
    RootCause,
    same_cause,
)
from stragglerlab.run.run_folder import (
    FAULTS_JSON,
    META_YAML,
    RUN_JSON,
    WHATIF_JSON,
    RunFolder,
)
from stragglerlab.run.run_record import RUN_SCHEMA, RunRecord
from stragglerlab.scenarios.faults import FaultKind, FaultRecord
from stragglerlab.trace.meta import JobMeta
from stragglerlab.trace.trace_io import read_trace
from stragglerlab.util import filecheck
from stragglerlab.util.errors import InputError

V0 = Path(__file__).resolve().parents[1] / "data" / "run_folder_v0"
FINDINGS = "detect/whatif.json"


@pytest.fixture
def folder(tmp_path: Path) -> RunFolder:
    """A writable copy of the old-format run folder."""
    shutil.copytree(V0, tmp_path / "run")
    return RunFolder.open(tmp_path / "run")


# -- reading the old format ------------------------------------------------------------
def test_old_run_folder_loads_typed(folder: RunFolder):
    assert folder.meta == JobMeta(dp_size=2, pp_size=2, trial_name="slow-worker-1")
    rec = folder.record
    assert rec.schema == RUN_SCHEMA and rec.outcome == "failed" and not rec.ok
    assert (rec.error.rank, rec.error.kind) == (3, "hang")
    assert rec.complete_steps == [1, 2] and rec.trace.clock_origin_monotonic_s == 5000.25
    assert rec.step_time_s == {0: 2.0, 1: 0.5, 2: 0.51, 3: None}
    assert rec.extra["backend"] == "gloo" and rec.extra["loss"] == {"1": 6.9, "2": 6.8}
    (fault,) = folder.faults
    assert fault.kind == FaultKind.SLOW_WORKER.value and fault.targets == [
        {"rank": 3, "dp_rank": 1, "stage": 1}] and fault.last_step is None
    assert folder.whatif["slowdown"] == 1.25
    worker, seq = folder.findings("whatif")
    assert worker.root_cause is RootCause.SLOW_WORKER and worker.ranks == [RankRef(3, 1, 1)]
    assert seq.root_cause is RootCause.SEQ_IMBALANCE and seq.ranks == []
    assert folder.findings_document("whatif").schema == FINDINGS_SCHEMA


def test_paths_and_presence(folder: RunFolder):
    assert folder.findings_path("whatif") == folder.path / "detect" / "whatif.json"
    assert folder.findings_path("x", online=True).name == "x-online.json"
    assert folder.whatif_path == folder.path / "whatif" / "whatif.json"
    assert folder.trace_part_path(2).as_posix().endswith("trace-parts/rank2.bin")
    assert folder.gc_log_path(1).as_posix().endswith("gc/rank1.jsonl")
    assert folder.has_record and folder.has_faults and folder.has_whatif and folder.has_meta
    assert folder.has_findings("whatif") and not folder.has_findings("whatif", online=True)
    assert not folder.has_trace
    with pytest.raises(InputError, match="trace.parquet"):
        folder.trace()
    with pytest.raises(InputError, match="run folder not found"):
        RunFolder.open(folder.path / "nope")


# -- round trips ------------------------------------------------------------------------
def test_record_round_trip_adds_schema(folder: RunFolder, tmp_path: Path):
    out = RunFolder(path=tmp_path / "new")
    out.path.mkdir()
    shutil.copy(folder.meta_path, out.meta_path)
    written = out.write_record(folder.record)
    assert written["schema"] == RUN_SCHEMA
    assert json.loads(out.record_path.read_text()) == written
    assert out.record == folder.record and out.record.to_json() == written


def test_record_writer_makes_strict_json(tmp_path: Path):
    folder = RunFolder(path=tmp_path)
    rec = RunRecord(outcome="ok", step_time_s={1: float("nan")},
                    extra={"loss": {"1": float("inf")}})
    folder.write_record(rec)
    assert "NaN" not in folder.record_path.read_text()
    assert folder.record.step_time_s == {1: None} and folder.record.extra["loss"] == {"1": None}


def test_faults_round_trip(folder: RunFolder, tmp_path: Path):
    out = RunFolder(path=tmp_path)
    out.write_faults(folder.faults + [FaultRecord("gc-pauses", [], 0, None, {"pause_ms": 100.0},
                                                  {"pause_ms": float("nan")})])
    again = out.faults
    assert again[0] == folder.faults[0]
    assert again[1].measured == {"pause_ms": None}  # unknown, not NaN
    out.write_faults([])
    assert out.faults == [] and json.loads(out.faults_path.read_text()) == []


def test_findings_round_trip_writes_the_one_vocabulary(folder: RunFolder, tmp_path: Path):
    out = RunFolder(path=tmp_path)
    findings = folder.findings("whatif") + [
        Finding([RankRef(1, 1, 0)], 2, 4, RootCause.NET_THROTTLE, 0.7, float("nan"), 3,
                {"score": float("inf")})]
    path = out.write_findings(FindingsDocument(detector="whatif", run=str(folder.path),
                                               online=True, findings=findings))
    assert path == out.findings_path("whatif", online=True)
    doc = json.loads(path.read_text())
    assert doc["schema"] == FINDINGS_SCHEMA and doc["online"] is True
    assert [f["root_cause"] for f in doc["findings"]] == [
        "slow-worker", "seq-imbalance", "net-throttle"]
    back = out.findings("whatif", online=True)
    assert back[:2] == findings[:2]
    assert back[2].estimated_slowdown is None and back[2].detail == {"score": None}
    assert [Finding.from_dict(f.to_dict()) for f in back] == back


def test_meta_and_whatif_round_trip(folder: RunFolder, tmp_path: Path):
    out = RunFolder(path=tmp_path)
    out.write_meta(folder.meta)
    out.write_whatif(folder.whatif)
    assert out.meta == folder.meta
    assert out.whatif == folder.whatif  # the old layout stays unversioned, as it was read


def test_trace_goes_through_the_one_parquet_reader(tmp_path: Path, tiny_parquet: Path,
                                                   tiny_meta: JobMeta):
    (tmp_path / "run").mkdir()
    shutil.copy(tiny_parquet, tmp_path / "run" / "trace.parquet")
    folder = RunFolder(path=tmp_path / "run")
    df, meta = read_trace(tiny_parquet)
    assert folder.trace().equals(df)
    assert folder.meta == meta == tiny_meta  # no meta.yaml: the meta embedded in the trace


# -- one vocabulary ---------------------------------------------------------------------
def test_root_causes_are_the_fault_kinds():
    assert {c.value for c in RootCause} == ({k.value for k in FaultKind}
                                            | {"none", "job-wide-comm", "job-wide-compute"})
    assert all(RootCause.of_kind(k).value == k.value for k in FaultKind)
    # old labels still load; old member names are aliases of the same members
    assert RootCause("worker") is RootCause.WORKER is RootCause.SLOW_WORKER
    assert RootCause("sequence-imbalance") is RootCause.SEQ_IMBALANCE
    assert RootCause("gc") is RootCause.GC_PAUSES and RootCause("network") is RootCause.NETWORK
    assert same_cause("net-delay", RootCause.NET_THROTTLE) and same_cause("crash", "hang")
    assert not same_cause(RootCause.SLOW_WORKER, RootCause.NET_THROTTLE)


def test_ground_truth_cause_is_the_fault_kind(folder: RunFolder):
    from stragglerlab.analysis.ground_truth import load_truths

    (truth,) = load_truths([folder.path])
    assert truth.kind == "slow-worker" and truth.cause is RootCause.SLOW_WORKER
    assert truth.ranks == frozenset({3})


def test_consumers_read_through_the_contract(folder: RunFolder):
    from stragglerlab.cli.train import failed_cleanly
    from stragglerlab.figures.data import load_run

    summary = load_run(folder.path)
    assert summary.outcome == "failed" and summary.seed == 0
    assert summary.faults == [folder.faults[0].to_json()] and summary.whatif["slowdown"] == 1.25
    assert not failed_cleanly(str(folder.path))  # no trace kept
    folder.trace_path.write_bytes(b"PAR1")
    assert failed_cleanly(str(folder.path))
    folder.record_path.write_text("{")
    assert not failed_cleanly(str(folder.path))


# -- bad files ----------------------------------------------------------------------------
READERS = {
    RUN_JSON: lambda f: f.record,
    FAULTS_JSON: lambda f: f.faults,
    META_YAML: lambda f: f.meta,
    WHATIF_JSON: lambda f: f.whatif,
    FINDINGS: lambda f: f.findings("whatif"),
}


def _edit(name: str, change):
    """A bad-file case: the v0 file as JSON/YAML data, changed by `change`."""
    def make(path: Path) -> None:
        if name == META_YAML:
            import yaml
            data = yaml.safe_load(path.read_text())
            change(data)
            path.write_text(yaml.safe_dump(data))
        else:
            data = json.loads(path.read_text())
            change(data)
            path.write_text(json.dumps(data))
    return make


def _set(*keys_value):
    *keys, value = keys_value

    def change(data):
        for k in keys[:-1]:
            data = data[k]
        data[keys[-1]] = value
    return change


GENERIC = {
    "missing": lambda p: p.unlink(),
    "empty": lambda p: p.write_text(""),
    "not-utf8": lambda p: p.write_bytes(b"\xff\xfe{\x00"),
    "not-parseable": lambda p: p.write_text("{[: nope"),
    "folder": lambda p: (p.unlink(), p.mkdir()),
    "wrong-shape": lambda p: p.write_text("42"),
}

SPECIFIC = [  # (file, case, change, field the message must name)
    (RUN_JSON, "outcome", _set("outcome", "maybe"), "outcome"),
    (RUN_JSON, "rank-out-of-job", _set("error", "rank", 7), "error.rank"),
    (RUN_JSON, "nan-step-time", lambda d: d["step_time_s"].update({"1": float("nan")}),
     "step_time_s.1"),
    (RUN_JSON, "bad-step", _set("trace", "complete_steps", ["a"]), "trace.complete_steps[0]"),
    (RUN_JSON, "schema", _set("schema", "other/9"), "schema"),
    (RUN_JSON, "seed-type", _set("seed", "zero"), "seed"),
    (FAULTS_JSON, "kind", _set(0, "kind", "x" * 500), "faults[0].kind"),
    (FAULTS_JSON, "rank-out-of-job", _set(0, "targets", 0, "rank", 9), "faults[0].targets[0].rank"),
    (FAULTS_JSON, "stage-out-of-job", _set(0, "targets", 0, "stage", 2),
     "faults[0].targets[0].stage"),
    (FAULTS_JSON, "inconsistent-rank", _set(0, "targets", 0, "rank", 2),
     "faults[0].targets[0].rank"),
    (FAULTS_JSON, "window", _set(0, "last_step", 0), "faults[0].last_step"),
    (FAULTS_JSON, "negative-step", _set(0, "first_step", -1), "faults[0].first_step"),
    (FAULTS_JSON, "nan", _set(0, "measured", "factor", float("inf")), "faults[0].measured.factor"),
    (FAULTS_JSON, "object", lambda d: d.append("slow"), "faults[1]"),
    (META_YAML, "size", _set("dp_size", 0), "dp_size"),
    (META_YAML, "world", _set("world_size", 5), "world_size"),
    (META_YAML, "type", _set("pp_size", "two"), "pp_size"),
    (WHATIF_JSON, "slowdown-type", _set("slowdown", "big"), "slowdown"),
    (WHATIF_JSON, "slowdown-nan", _set("slowdown", float("nan")), "slowdown"),
    (WHATIF_JSON, "slowdown-negative", _set("slowdown", -1.0), "slowdown"),
    (WHATIF_JSON, "table", _set("m_w", [0.8]), "m_w"),
    (WHATIF_JSON, "steps", _set("steps", [-1]), "steps[0]"),
    (WHATIF_JSON, "nested-nan", _set("step_slowdown", "1", float("inf")),
     "step_slowdown.1"),
    (FINDINGS, "detector", _set("detector", "other"), "detector"),
    (FINDINGS, "cause", _set("findings", 0, "root_cause", "bogus"), "findings[0].root_cause"),
    (FINDINGS, "rank-out-of-job", _set("findings", 0, "ranks", 0, "rank", 9),
     "findings[0].ranks[0].rank"),
    (FINDINGS, "window", _set("findings", 0, "last_step", 0), "findings[0].last_step"),
    (FINDINGS, "confidence", _set("findings", 0, "confidence", 2.0), "findings[0].confidence"),
    (FINDINGS, "nan", _set("findings", 0, "estimated_slowdown", float("nan")),
     "findings[0].estimated_slowdown"),
    (FINDINGS, "list", _set("findings", {"a": 1}), "findings"),
]

CASES = [pytest.param(name, GENERIC[case], None, id=f"{name}-{case}")
         for name in READERS for case in GENERIC] + \
        [pytest.param(name, _edit(name, change), field, id=f"{name}-{case}")
         for name, case, change, field in SPECIFIC]


@pytest.mark.parametrize("name,make_bad,field", CASES)
def test_bad_file_is_one_input_error_naming_file_and_field(folder: RunFolder, name, make_bad,
                                                            field):
    path = folder.path / name
    make_bad(path)
    with pytest.raises(InputError) as err:
        READERS[name](folder)
    message = str(err.value)
    assert str(path) in message and "\n" not in message and "Traceback" not in message
    assert len(message) < 400 + len(str(path))  # echoed values are truncated
    if field is not None:
        assert field in message, message


@pytest.mark.parametrize("name", [RUN_JSON, FAULTS_JSON, WHATIF_JSON, FINDINGS, META_YAML])
def test_oversized_file_is_refused_before_reading(folder: RunFolder, monkeypatch, name):
    monkeypatch.setattr(filecheck, "MAX_JSON_BYTES", 64)
    monkeypatch.setattr(filecheck, "MAX_YAML_BYTES", 64)
    with pytest.raises(InputError, match="limit"):
        READERS[name](folder)


def test_detector_load_run_reports_a_bad_run_json(folder: RunFolder, tiny_parquet: Path):
    from stragglerlab.analysis.detectors import load_run

    shutil.copy(tiny_parquet, folder.trace_path)
    folder.record_path.write_text('{"outcome": "ok", "error": {"rank": "3", "kind": "hang"}}')
    with pytest.raises(InputError, match=r"run\.json: error\.rank: expected an integer"):
        load_run(folder.path)
