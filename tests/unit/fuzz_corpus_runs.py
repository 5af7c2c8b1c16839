"""Bad inputs for the verbs that read run folders, figures folders and scenario configs.

The companion of tests/unit/fuzz_corpus.py (same `Case`, same `Base`):
`detect` (run.json, meta.yaml, trace), `score` (faults.json, findings),
`figures` (whatif.json, run.json), `report` (figure JSON, scores JSON) and
`train` (scenario configs that must be refused before Ray starts).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.fuzz_corpus import Base, Case, _bad_out, _copy_run, _run_file

NOT_UTF8 = b'{"a": "\xff\xfe"}'
DEEP = "[" * 100_000 + "]" * 100_000
HUGE_INT = '{"a": ' + "9" * 5000 + "}"  # past Python's 4,300-digit str -> int limit

RUN_JSON_BAD = {
    "list": [1, 2],
    "string": "ok",
    "null": None,
    "outcome-bad": {"outcome": "maybe"},
    "outcome-int": {"outcome": 3},
    "error-string": {"outcome": "failed", "error": "boom"},
    "error-rank-abc": {"outcome": "failed", "error": {"rank": "abc", "kind": "x",
                                                       "message": "m"}},
    "error-rank-99": {"outcome": "failed", "error": {"rank": 99, "kind": "x", "message": "m"}},
    "error-rank-nan": {"outcome": "failed", "error": {"rank": float("nan"), "kind": "x",
                                                       "message": "m"}},
    "trace-steps-string": {"outcome": "ok", "trace": {"complete_steps": "all"}},
    "trace-steps-neg": {"outcome": "ok", "trace": {"complete_steps": [-1, 2]}},
    "wall-nan": {"outcome": "ok", "wall_s": {"total": float("nan")}},
    "scenario-run-list": {"outcome": "ok", "scenario": {"run": [1]}},
    "scenario-faults-dict": {"outcome": "ok", "scenario": {"faults": {"kind": "x"}}},
}

FAULT = {"kind": "slow-worker", "targets": [{"rank": 3, "dp_rank": 1, "stage": 1}],
         "first_step": 0, "last_step": None, "requested": {"factor": 2.0},
         "measured": {"factor": 2.0}}


def _fault(**kw) -> list:
    return [dict(FAULT, **kw)]


FAULTS_BAD = {
    "object": {"kind": "slow-worker"},
    "string": "none",
    "list-of-ints": [1, 2],
    "kind-unknown": _fault(kind="cosmic-ray"),
    "kind-int": _fault(kind=7),
    "targets-all": _fault(targets="all"),
    "targets-empty-dict": _fault(targets=[{}]),
    "target-rank-abc": _fault(targets=[{"rank": "abc", "dp_rank": 1, "stage": 1}]),
    "target-rank-99": _fault(targets=[{"rank": 99, "dp_rank": 1, "stage": 1}]),
    "target-dp-99": _fault(targets=[{"rank": 3, "dp_rank": 99, "stage": 1}]),
    "target-stage-neg": _fault(targets=[{"rank": 3, "dp_rank": 1, "stage": -1}]),
    "target-mismatch": _fault(targets=[{"rank": 0, "dp_rank": 1, "stage": 1}]),
    "first-step-abc": _fault(first_step="abc"),
    "first-step-nan": _fault(first_step=float("nan")),
    "first-step-1e30": _fault(first_step=1e30),
    "first-step-int-1e30": _fault(first_step=10**30),
    "first-step-neg": _fault(first_step=-3),
    "last-before-first": _fault(first_step=2, last_step=1),
    "last-step-float": _fault(last_step=1.5),
    "requested-list": _fault(requested=[1]),
    "measured-inf": _fault(measured={"factor": float("inf")}),
    "measured-string": _fault(measured={"factor": "big"}),
    "too-many": _fault() * 1_001,
}

FINDING = {"ranks": [{"rank": 3, "dp_rank": 1, "stage": 1}], "first_step": 0, "last_step": 2,
           "root_cause": "slow-worker", "confidence": 1.0, "estimated_slowdown": 1.3,
           "detected_at_step": None, "detail": {}}


def _findings(**kw) -> dict:
    return {"schema": "stragglerlab.findings/1", "detector": "whatif", "run": "x",
            "online": False, "findings": [dict(FINDING, **kw)]}


FINDINGS_BAD = {
    "list": [FINDING],
    "findings-string": dict(_findings(), findings="none"),
    "schema-wrong": dict(_findings(), schema="other/9"),
    "rank-abc": _findings(ranks=[{"rank": "abc", "dp_rank": 1, "stage": 1}]),
    "rank-99": _findings(ranks=[{"rank": 99, "dp_rank": 1, "stage": 1}]),
    "ranks-all": _findings(ranks="all"),
    "first-step-nan": _findings(first_step=float("nan")),
    "last-before-first": _findings(first_step=2, last_step=0),
    "confidence-2": _findings(confidence=2.0),
    "confidence-text": _findings(confidence="high"),
    "root-cause-bad": _findings(root_cause="gremlins"),
    "slowdown-inf": _findings(estimated_slowdown=float("inf")),
}

WHATIF_BAD = {
    "list": [1],
    "string": "x",
    "schema-wrong": {"schema": "nope"},
    "empty-object": {},
    "slowdown-only": {"schema": "stragglerlab.whatif/2", "slowdown": 1.2},
}


def detect_cases() -> list[Case]:
    """Bad run folders for `detect`."""
    cases = [Case(f"detect-runjson-{k}", "detect", _run_file("detect", "run.json", v))
             for k, v in RUN_JSON_BAD.items()]
    cases += [
        Case("detect-runjson-not-utf8", "detect", _run_file("detect", "run.json", NOT_UTF8)),
        Case("detect-runjson-deep", "detect", _run_file("detect", "run.json", DEEP)),
        Case("detect-runjson-not-json", "detect", _run_file("detect", "run.json", "{oops")),
        Case("detect-meta-not-utf8", "detect",
             _run_file("detect", "meta.yaml", b"dp_size: 2\npp_size: 2\nx: \xff\n")),
        Case("detect-meta-dp-1e9", "detect",
             _run_file("detect", "meta.yaml", "dp_size: 1000000000\npp_size: 2\n")),
        Case("detect-meta-list", "detect", _run_file("detect", "meta.yaml", "[1, 2]\n")),
        Case("detect-trace-zero", "detect", _run_file("detect", "trace.parquet", b"")),
        Case("detect-trace-csv", "detect", _run_file("detect", "trace.parquet", "a,b\n1,2\n")),
    ]

    def unknown_detector(d: Path, base: Base):
        return (["detect", "--run", str(base.run), "--detector", "nope", "--out",
                 str(d / "out")], "nope", d / "out")

    def missing_run(d: Path, base: Base):
        return (["detect", "--run", str(d / "nothere"), "--out", str(d / "out")],
                str(d / "nothere"), d / "out")
    cases += [Case("detect-unknown-detector", "detect", unknown_detector),
              Case("detect-missing-run", "detect", missing_run)]
    cases += [Case(f"detect-out-{k}", "detect", _bad_out("detect", k))
              for k in ("file", "under", "long", "empty")]
    return cases


def score_cases() -> list[Case]:
    """Bad ground truth and findings for `score`."""
    cases = [Case(f"score-faults-{k}", "score", _run_file("score", "faults.json", v))
             for k, v in FAULTS_BAD.items()]
    cases += [Case(f"score-findings-{k}", "score", _run_file("score", "detect/whatif.json", v))
              for k, v in FINDINGS_BAD.items()]
    cases += [
        Case("score-faults-not-utf8", "score", _run_file("score", "faults.json", NOT_UTF8)),
        Case("score-faults-deep", "score", _run_file("score", "faults.json", DEEP)),
        Case("score-faults-huge-int", "score", _run_file("score", "faults.json", HUGE_INT)),
        Case("score-findings-huge-int", "score",
             _run_file("score", "detect/whatif.json", HUGE_INT)),
        Case("score-faults-empty-file", "score", _run_file("score", "faults.json", b"")),
        Case("score-findings-not-utf8", "score",
             _run_file("score", "detect/whatif.json", NOT_UTF8)),
        Case("score-findings-deep", "score", _run_file("score", "detect/whatif.json", DEEP)),
        Case("score-trace-zero", "score", _run_file("score", "trace.parquet", b"")),
        Case("score-trace-csv", "score", _run_file("score", "trace.parquet", "a,b\n1,2\n")),
        Case("score-runjson-list", "score", _run_file("score", "run.json", [1])),
        Case("score-runjson-not-utf8", "score", _run_file("score", "run.json", NOT_UTF8)),
    ]
    cases += [Case(f"score-out-{k}", "score", _bad_out("score", k))
              for k in ("file", "under", "long", "empty")]
    return cases


def figures_cases() -> list[Case]:
    """Bad what-if results and run records for `figures`."""
    cases = [Case(f"figures-whatif-{k}", "figures", _run_file("figures", "whatif/whatif.json", v))
             for k, v in WHATIF_BAD.items()]
    cases += [
        Case("figures-whatif-not-utf8", "figures",
             _run_file("figures", "whatif/whatif.json", NOT_UTF8)),
        Case("figures-whatif-deep", "figures", _run_file("figures", "whatif/whatif.json", DEEP)),
        Case("figures-whatif-huge-int", "figures",
             _run_file("figures", "whatif/whatif.json", HUGE_INT)),
        Case("figures-runjson-scenario-run-list", "figures",
             _run_file("figures", "run.json", RUN_JSON_BAD["scenario-run-list"])),
        Case("figures-runjson-list", "figures", _run_file("figures", "run.json", [1])),
        Case("figures-runjson-not-utf8", "figures", _run_file("figures", "run.json", NOT_UTF8)),
    ]

    def unknown_fig(d: Path, base: Base):
        return (["figures", "--runs", str(base.run), "--only", "fig99", "--out",
                 str(d / "out")], "fig99", d / "out")
    cases.append(Case("figures-unknown-only", "figures", unknown_fig))
    meta = {"dp_size": 2, "pp_size": 2}
    cases += [
        Case("figures-ref-result-not-json", "figures", _reference(b"{oops")),
        Case("figures-ref-result-list", "figures", _reference([1, 2])),
        Case("figures-ref-result-no-tables", "figures", _reference({"job_meta": meta})),
        Case("figures-ref-result-dp-1e9", "figures",
             _reference({"job_meta": {"dp_size": 10**9, "pp_size": 2}})),
        Case("figures-ref-result-nan-cells", "figures", _reference({
            "job_meta": meta, "blocking_decompose_by_dp_rank": {"0": 1.0, "1": "x"},
            "blocking_decompose_by_stage": {"0": 1.0, "1": 1.0}})),
        Case("figures-ref-whatif-empty", "figures", _reference({}, whatif={})),
    ]
    cases += [Case(f"figures-out-{k}", "figures", _bad_out("figures", k))
              for k in ("file", "under", "long", "empty")]
    return cases


def _reference(result: object, whatif: object = None):
    """figures --reference with a bad artifact result-AR.json (or a bad AR/whatif.json)."""
    def build(d: Path, base: Base):
        import shutil

        ref, rw = d / "ref", d / "rw" / "AR"
        ref.mkdir(parents=True)
        rw.mkdir(parents=True)
        shutil.copy(base.run / "trace.parquet", ref / "trace-AR.parquet")
        bad = ref / "result-AR.json"
        bad.write_bytes(result if isinstance(result, bytes) else json.dumps(result).encode())
        shutil.copy(base.run / "whatif" / "whatif.json", rw / "whatif.json")
        if whatif is not None:
            bad = rw / "whatif.json"
            bad.write_text(json.dumps(whatif))
        return (["figures", "--reference", str(ref), "--reference-whatif", str(d / "rw"),
                 "--only", "fig14_heatmaps", "--out", str(d / "out")], str(bad), d / "out")
    return build


def _report_fig(entry: object, raw: bytes | None = None):
    def build(d: Path, base: Base):
        figs = d / "figures"
        d.mkdir(parents=True, exist_ok=True)
        import shutil

        shutil.copytree(base.figures, figs)
        path = figs / "fig03_waste_cdf.json"
        path.write_bytes(raw if raw is not None else json.dumps(entry).encode())
        return ["report", "--figures", str(figs), "--out", str(d / "out")], str(path), d / "out"
    return build


def _report_scores(content: object):
    def build(d: Path, base: Base):
        d.mkdir(parents=True, exist_ok=True)
        path = d / "scores.json"
        path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
        return (["report", "--figures", str(base.figures), "--scores", str(path),
                 "--out", str(d / "out")], str(path), d / "out")
    return build


def report_cases() -> list[Case]:
    """Bad figure JSON and scores JSON for `report`."""
    good = {"name": "fig03_waste_cdf", "title": "t", "paper": {}, "ours": {"x": 1.0},
            "source": "testbed", "note": "", "paths": ["fig03_waste_cdf.png"]}
    cases = [
        Case("report-fig-png-dotdot", "report",
             _report_fig(dict(good, paths=["../../../../etc/x.png"]))),
        Case("report-fig-png-absolute", "report", _report_fig(dict(good, paths=["/etc/x.png"]))),
        Case("report-fig-paths-string", "report", _report_fig(dict(good, paths="a.png"))),
        Case("report-fig-list", "report", _report_fig([1, 2])),
        Case("report-fig-not-utf8", "report", _report_fig(None, NOT_UTF8)),
        Case("report-fig-deep", "report", _report_fig(None, DEEP.encode())),
        Case("report-fig-ours-list", "report", _report_fig(dict(good, ours=[1]))),
        Case("report-fig-title-int", "report", _report_fig(dict(good, title=5))),
        Case("report-scores-list", "report", _report_scores([1])),
        Case("report-scores-not-utf8", "report", _report_scores(NOT_UTF8)),
        Case("report-scores-deep", "report", _report_scores(DEEP.encode())),
        Case("report-scores-detector-string", "report", _report_scores({"whatif": "good"})),
        Case("report-scores-f1-text", "report", _report_scores({"whatif": {"f1": "high"}})),
    ]

    def figures_missing(d: Path, base: Base):
        return (["report", "--figures", str(d / "nope"), "--out", str(d / "out")],
                str(d / "nope"), d / "out")

    def runs_missing(d: Path, base: Base):
        return (["report", "--figures", str(base.figures), "--runs", str(d / "nope"),
                 "--out", str(d / "out")], str(d / "nope"), d / "out")
    cases += [Case("report-figures-missing", "report", figures_missing),
              Case("report-runs-missing", "report", runs_missing)]
    cases += [Case(f"report-out-{k}", "report", _bad_out("report", k))
              for k in ("file", "under", "long", "empty")]
    return cases


TRAIN_BAD = {
    "dp-10000": "parallel: {dp: 10000, pp: 1}",
    "dp100-pp100": "parallel: {dp: 100, pp: 100}",
    "dp-2e40": "parallel: {dp: 1099511627776, pp: 1}",
    "dp-zero": "parallel: {dp: 0}",
    "dp-text": "parallel: {dp: two}",
    "dp-float": "parallel: {dp: 2.5}",
    "microbatches-1e9": "parallel: {microbatches: 1000000000}",
    "layers-per-stage-huge": "parallel: {layers_per_stage: [1000000, 1000000]}\n"
                             "  model: {n_layers: 2000000}",
    "timeout-nan": "run: {collective_timeout_s: .nan}",
    "timeout-inf": "run: {collective_timeout_s: .inf}",
    "timeout-1e300": "run: {collective_timeout_s: 1.0e300}",
    "timeout-neg": "run: {collective_timeout_s: -1}",
    "cores-nan": "run: {cores_per_rank: .nan}",
    "cores-inf": "run: {cores_per_rank: .inf}",
    "cores-tiny": "run: {cores_per_rank: 0.0001}",
    "cores-1e6": "run: {cores_per_rank: 1000000.0}",
    "lr-nan": "run: {lr: .nan}",
    "lr-inf": "run: {lr: .inf}",
    "lr-neg": "run: {lr: -1.0}",
    "clip-nan": "run: {clip_norm: .nan}",
    "steps-1e12": "run: {steps: 1000000000000}",
    "steps-float-1e12": "run: {steps: 1.0e12}",
    "threads-1e6": "run: {threads_per_rank: 1000000}",
    "gc-every-huge": "run: {planned_gc_every: 1000000000000}",
    "seed-neg-huge": "run: {seed: -99999999999999999999999}",
    "vocab-1e9": "model: {vocab: 1000000000}",
    "hidden-1e6": "model: {hidden: 1000000, n_heads: 4}",
    "layers-1e6": "model: {n_layers: 1000000}",
    "heads-zero": "model: {n_heads: 0}",
    "seq-len-1e9": "model: {max_seq_len: 1000000000}",
    "tokens-1e9": "data: {tokens_per_microbatch: 1000000000}\n  model: {max_seq_len: 100000000}",
    "sigma-nan": "data: {longtail_sigma: .nan}",
    "sigma-1e6": "data: {longtail_sigma: 1000000.0}",
    "dist-unknown": "data: {length_distribution: zipf}",
    "backend-unknown": "run: {backend: mpi}",
    "unknown-key": "run: {stepz: 3}",
    "section-list": "run: [1, 2]",
    "fault-kind-unknown": "faults: [{kind: cosmic-ray, targets: [{dp_rank: 0, stage: 0}]}]",
    "fault-target-out": "faults: [{kind: slow-worker, targets: [{dp_rank: 9, stage: 0}], "
                        "params: {factor: 1.5}}]",
    "fault-factor-nan": "faults: [{kind: slow-worker, targets: [{dp_rank: 0, stage: 0}], "
                        "params: {factor: .nan}}]",
    "fault-factor-text": "faults: [{kind: slow-worker, targets: [{dp_rank: 0, stage: 0}], "
                         "params: {factor: fast}}]",
    "fault-factor-neg": "faults: [{kind: slow-worker, targets: [{dp_rank: 0, stage: 0}], "
                        "params: {factor: -2}}]",
    "fault-factor-1e300": "faults: [{kind: slow-worker, targets: [{dp_rank: 0, stage: 0}], "
                          "params: {factor: 1.0e300}}]",
    "fault-unknown-param": "faults: [{kind: slow-worker, targets: [{dp_rank: 0, stage: 0}], "
                           "params: {factr: 2}}]",
    "fault-steps-backwards": "faults: [{kind: slow-worker, targets: [{dp_rank: 0, stage: 0}], "
                             "params: {factor: 2}, first_step: 5, last_step: 2}]",
    "fault-step-huge": "faults: [{kind: slow-worker, targets: [{dp_rank: 0, stage: 0}], "
                       "params: {factor: 2}, first_step: 1000000000000}]",
    "fault-not-list": "faults: {kind: slow-worker}",
    "gc-pause-huge": "faults: [{kind: gc-pauses, targets: [{dp_rank: 0, stage: 0}], "
                     "params: {garbage_mb: 1000000000}}]",
    "net-rate-nan": "faults: [{kind: net-throttle, targets: [{dp_rank: 0, stage: 0}], "
                    "params: {rate_mbit: .nan}}]",
}

TRAIN_FILES = {
    "not-utf8": b"scenarios:\n  x:\n    description: \"\xff\"\n",
    "list": b"- 1\n",
    "bad-yaml": b"scenarios: [\n",
    "alias-bomb": b"a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                  b"c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
                  b"e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
                  b"scenarios:\n  x:\n    description: *f\n",
    "deep": b"scenarios:\n  x:\n    description: " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "huge": b"scenarios: {}\n# " + b"x" * (5 * 1024 * 1024) + b"\n",
    "python-tag": b"scenarios:\n  x: !!python/object:os.system {}\n",
    "scenario-list": b"scenarios:\n  x: [1]\n",
}


def _train(body: bytes | str):
    def build(d: Path, base: Base):
        d.mkdir(parents=True, exist_ok=True)
        path = d / "bad.yaml"
        if isinstance(body, str):
            body_text = "scenarios:\n  x:\n    parallel: {dp: 2, pp: 2}\n    " + body + "\n"
            # a second section given on the same line group merges into one mapping
            path.write_text(body_text.replace("    parallel: {dp: 2, pp: 2}\n    parallel:",
                                              "    parallel:"))
        else:
            path.write_bytes(body)
        return (["train", "--config", str(path), "--scenario", "x", "--out", str(d / "out")],
                str(path), d / "out")
    return build


def train_cases() -> list[Case]:
    """Scenario configs `train` must refuse before anything starts."""
    cases = [Case(f"train-{k}", "train", _train(v)) for k, v in TRAIN_BAD.items()]
    cases += [Case(f"train-file-{k}", "train", _train(v)) for k, v in TRAIN_FILES.items()]

    def missing(d: Path, base: Base):
        return (["train", "--config", str(d / "nope.yaml"), "--scenario", "x", "--out",
                 str(d / "out")], str(d / "nope.yaml"), d / "out")

    def unknown(d: Path, base: Base):
        return (["train", "--scenario", "no-such", "--out", str(d / "out")], "no-such",
                d / "out")
    cases += [Case("train-config-missing", "train", missing),
              Case("train-unknown-scenario", "train", unknown)]
    cases += [Case(f"train-out-{k}", "train", _bad_out("train", k))
              for k in ("file", "under", "long", "empty")]
    return cases


def run_cases() -> list[Case]:
    """Every case of this module and of tests/unit/fuzz_corpus_scores.py."""
    from tests.unit.fuzz_corpus_scores import scores_cases  # it builds on this module

    return (detect_cases() + score_cases() + figures_cases() + report_cases() + train_cases()
            + scores_cases())


__all__ = ["_copy_run", "run_cases"]
