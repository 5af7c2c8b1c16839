"""A corpus of bad inputs, one generator per verb, for tests/unit/test_fuzz_*.py.

Each `Case` builds its bad files under a scratch folder and returns the argv of
one `stragglerlab` call, the path the error message must name and the --out
folder that must not appear (or change). The valid inputs they start from (a
tiny synthetic run folder with what-if results and findings) are built once
by `make_base`.

    base = make_base(tmp)
    for case in all_cases():
        argv, named, out = case.build(tmp / case.id, base)
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

Build = Callable[[Path, "Base"], tuple[list[str], str, Path]]


@dataclass(frozen=True)
class Case:
    """One bad input: its id, its verb and how to build it."""

    id: str
    verb: str
    build: Build


@dataclass
class Base:
    """Valid inputs the cases mutate."""

    run: Path
    """A synthetic run folder (dp2 x pp2) with run.json, whatif/ and detect/whatif.json."""
    df: pd.DataFrame
    """Its trace."""
    meta: dict
    """Its job meta as a dict."""
    figures: Path
    """A figures folder with one figure JSON and its PNG."""


def make_base(root: Path) -> Base:
    """Build the valid inputs once (synth, whatif, detect) under root."""
    from stragglerlab.cli import main
    from stragglerlab.run.run_folder import RunFolder
    from stragglerlab.run.run_record import RunRecord
    from stragglerlab.trace.trace_io import read_trace

    run = root / "run"
    assert main(["synth", "--quiet", "--out", str(run), "--dp", "2", "--pp", "2", "--steps", "3",
                 "--microbatches", "2", "--slow", "1,1,2.0"]) == 0
    RunFolder(path=run).write_record(RunRecord(outcome="ok"))
    assert main(["whatif", "--quiet", "--run", str(run)]) == 0
    assert main(["detect", "--quiet", "--run", str(run), "--out", str(run / "detect")]) == 0
    df, meta = read_trace(run / "trace.parquet")
    df = pd.read_parquet(run / "trace.parquet")
    figures = root / "figures"
    figures.mkdir()
    (figures / "fig03_waste_cdf.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    (figures / "fig03_waste_cdf.json").write_text(json.dumps({
        "name": "fig03_waste_cdf", "title": "waste", "paper": {}, "ours": {"x": 1.0},
        "source": "testbed", "note": "", "paths": ["fig03_waste_cdf.png"]}))
    return Base(run=run, df=df, meta=meta.to_dict(), figures=figures)


# --- helpers -------------------------------------------------------------------------


def _copy_run(base: Base, d: Path) -> Path:
    run = d / "run"
    shutil.copytree(base.run, run)
    return run


def _write_trace(df: pd.DataFrame, meta: dict, path: Path) -> None:
    from stragglerlab.trace.meta import JobMeta
    from stragglerlab.trace.trace_io import write_trace

    write_trace(df, JobMeta(**meta) if isinstance(meta, dict) else meta, path)


def _whatif_trace(mutate: Callable[[pd.DataFrame], pd.DataFrame]) -> Build:
    def build(d: Path, base: Base):
        path = d / "trace.parquet"
        _write_trace(mutate(base.df.copy()), base.meta, path)
        return ["whatif", "--trace", str(path), "--out", str(d / "out")], str(path), d / "out"
    return build


def _whatif_raw(data: bytes | str, name: str = "trace.parquet") -> Build:
    def build(d: Path, base: Base):
        d.mkdir(parents=True, exist_ok=True)
        path = d / name
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        return ["whatif", "--trace", str(path), "--out", str(d / "out")], str(path), d / "out"
    return build


def _whatif_meta(text: str | bytes) -> Build:
    def build(d: Path, base: Base):
        d.mkdir(parents=True, exist_ok=True)
        path = d / "meta.yaml"
        path.write_bytes(text.encode() if isinstance(text, str) else text)
        return (["whatif", "--trace", str(base.run / "trace.parquet"), "--meta", str(path),
                 "--out", str(d / "out")], str(path), d / "out")
    return build


def _run_file(verb: str, rel: str, content: object) -> Build:
    """A copy of the base run with one file replaced (bytes, text or JSON-able)."""
    def build(d: Path, base: Base):
        run = _copy_run(base, d)
        path = run / rel
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content)
        else:
            path.write_text(json.dumps(content))
        out = d / "out"
        if verb == "detect":
            argv = ["detect", "--run", str(run), "--out", str(out)]
        elif verb == "score":
            argv = ["score", "--runs", str(run), "--detector", "whatif", "--offline-only",
                    "--out", str(out)]
        elif verb == "figures":
            argv = ["figures", "--runs", str(run), "--only", "fig03_waste_cdf", "--out", str(out)]
        else:
            argv = ["whatif", "--run", str(run), "--out", str(out)]
        return argv, str(path), out
    return build


def _bad_out(verb: str, kind: str) -> Build:
    def build(d: Path, base: Base):
        d.mkdir(parents=True, exist_ok=True)
        f = d / "afile"
        f.write_text("x")
        out = {"file": f, "under": f / "sub", "long": d / ("x" * 300),
               "empty": Path("")}[kind]
        o = str(out) if kind != "empty" else ""
        argv = {
            "whatif": ["whatif", "--trace", str(base.run / "trace.parquet"), "--out", o],
            "detect": ["detect", "--run", str(base.run), "--out", o],
            "score": ["score", "--runs", str(base.run), "--detector", "whatif", "--offline-only",
                      "--out", o],
            "figures": ["figures", "--runs", str(base.run), "--only", "fig03_waste_cdf",
                        "--out", o],
            "report": ["report", "--figures", str(base.figures), "--out", o],
            "synth": ["synth", "--out", o],
            "train": ["train", "--scenario", "clean-dp2-pp2", "--out", o],
        }[verb]
        return argv, "--out", (f if kind in ("file", "under") else d / "nothing")
    return build


# --- generators per verb -------------------------------------------------------------


def _set(col: str, value, rows=slice(None)) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def mutate(df: pd.DataFrame) -> pd.DataFrame:
        if isinstance(rows, slice) and rows == slice(None):
            df[col] = value
        else:
            df.loc[df.index[rows], col] = value
        return df
    return mutate


def _shift(col: str, by: float) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def mutate(df: pd.DataFrame) -> pd.DataFrame:
        df[col] = df[col] + by
        return df
    return mutate


def _swap_starts(df: pd.DataFrame) -> pd.DataFrame:
    """Two compute ops of one worker in one step with their start times swapped far apart."""
    m = (df["step"] == df["step"].min()) & (df["dp_rank"] == 0) & (df["stage"] == 0)
    idx = df.index[m & (df["optype"].astype(str) == "forward-compute")]
    df.loc[idx[0], "start_ts"] = df.loc[idx[0], "start_ts"] + 1e6
    return df


def _datetime_start(df: pd.DataFrame) -> pd.DataFrame:
    df["start_ts"] = pd.to_datetime(df["start_ts"], unit="s")
    return df


def _text_col(col: str) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def mutate(df: pd.DataFrame) -> pd.DataFrame:
        df[col] = df[col].astype(str)
        df.loc[df.index[0], col] = "abc"
        return df
    return mutate


def _drop(col: str) -> Callable[[pd.DataFrame], pd.DataFrame]:
    return lambda df: df.drop(columns=[col])


def whatif_cases() -> list[Case]:
    """Bad traces and metas for `whatif`."""
    cases = [
        Case("trace-zero-bytes", "whatif", _whatif_raw(b"")),
        Case("trace-csv", "whatif", _whatif_raw("rank,dp_rank,stage\n0,0,0\n")),
        Case("trace-random", "whatif", _whatif_raw(bytes(range(256)) * 40)),
        Case("trace-PAR1-only", "whatif", _whatif_raw(b"PAR1" + b"\0" * 100 + b"PAR1")),
        Case("trace-utf8-bom", "whatif", _whatif_raw("\ufeffhello")),
        Case("trace-empty-rows", "whatif", _whatif_trace(lambda df: df.iloc[:0])),
        Case("trace-all-durations-zero", "whatif", _whatif_trace(_set("duration", 0.0))),
        Case("trace-start-minus-1e6", "whatif", _whatif_trace(_shift("start_ts", -1e6))),
        Case("trace-start-plus-1e17", "whatif", _whatif_trace(_shift("start_ts", 1e17))),
        Case("trace-start-datetime", "whatif", _whatif_trace(_datetime_start)),
        Case("trace-duration-1e300", "whatif", _whatif_trace(_set("duration", 1e300, 3))),
        Case("trace-duration-1e6", "whatif", _whatif_trace(_set("duration", 1e6, 5))),
        Case("trace-duration-nan", "whatif", _whatif_trace(_set("duration", np.nan, 2))),
        Case("trace-duration-inf", "whatif", _whatif_trace(_set("duration", np.inf, 2))),
        Case("trace-duration-negative", "whatif", _whatif_trace(_set("duration", -1.0, 2))),
        Case("trace-start-nan", "whatif", _whatif_trace(_set("start_ts", np.nan, 1))),
        Case("trace-start-inf", "whatif", _whatif_trace(_set("start_ts", -np.inf, 1))),
        Case("trace-seq-id-negative", "whatif", _whatif_trace(_set("seq_id", -1, 0))),
        Case("trace-seq-id-2e40", "whatif", _whatif_trace(_set("seq_id", 2**40, 0))),
        Case("trace-seq-id-huge-all", "whatif", _whatif_trace(_shift("seq_id", 2**40))),
        Case("trace-seq-id-gap", "whatif", _whatif_trace(_shift("seq_id", 1000))),
        Case("trace-step-2e62", "whatif", _whatif_trace(_set("step", 2**62, 0))),
        Case("trace-step-negative", "whatif", _whatif_trace(_shift("step", -100))),
        Case("trace-mb-id-huge", "whatif", _whatif_trace(_set("mb_id", 2**40, 0))),
        Case("trace-mc-huge", "whatif", _whatif_trace(_set("mc", 2**40))),
        Case("trace-gmc-huge", "whatif", _whatif_trace(_set("gmc", 2**50))),
        Case("trace-rank-huge", "whatif", _whatif_trace(_set("rank", 2**40, 0))),
        Case("trace-rank-negative", "whatif", _whatif_trace(_set("rank", -5, 0))),
        Case("trace-dp-rank-out", "whatif", _whatif_trace(_set("dp_rank", 7, 0))),
        Case("trace-stage-negative", "whatif", _whatif_trace(_set("stage", -1, 0))),
        Case("trace-unknown-optype", "whatif", _whatif_trace(
            lambda df: df.assign(optype=df["optype"].astype(str).replace("optimizer", "opt")))),
        Case("trace-non-monotone", "whatif", _whatif_trace(_swap_starts)),
        Case("trace-stages-swapped", "whatif",
             _whatif_trace(lambda df: df.assign(stage=1 - df["stage"]))),
        Case("trace-bool-step", "whatif", _whatif_trace(lambda df: df.assign(step=True))),
        Case("trace-drop-half", "whatif", _whatif_trace(lambda df: df.iloc[: len(df) // 2])),
        Case("trace-duplicate-rows", "whatif", _whatif_trace(lambda df: pd.concat([df, df]))),
        Case("trace-one-row", "whatif", _whatif_trace(lambda df: df.iloc[:1])),
    ]
    for col in ("rank", "dp_rank", "stage", "step", "seq_id", "mb_id", "start_ts", "duration"):
        cases.append(Case(f"trace-text-{col}", "whatif", _whatif_trace(_text_col(col))))
    for col in ("rank", "step", "optype", "start_ts", "duration", "seq_id", "mc", "gmc"):
        cases.append(Case(f"trace-missing-{col}", "whatif", _whatif_trace(_drop(col))))
    meta = "dp_size: 2\npp_size: 2\n"
    metas = {
        "meta-not-utf8": b"dp_size: 2\npp_size: 2\ntrial_name: \xff\xfe\n",
        "meta-list": "- 1\n- 2\n",
        "meta-string": "hello\n",
        "meta-empty": "",
        "meta-dp-1e9": "dp_size: 1000000000\npp_size: 2\n",
        "meta-dp-2e40": "dp_size: 1099511627776\npp_size: 1\n",
        "meta-pp-1e6": "dp_size: 2\npp_size: 1000000\n",
        "meta-tp-huge": meta + "tp_size: 1000000000000\n",
        "meta-vpp-2": meta + "vpp_size: 2\n",
        "meta-vpp-1e9": meta + "vpp_size: 1000000000\n",
        "meta-dp-zero": "dp_size: 0\npp_size: 2\n",
        "meta-dp-negative": "dp_size: -2\npp_size: 2\n",
        "meta-dp-float": "dp_size: 2.5\npp_size: 2\n",
        "meta-dp-text": "dp_size: two\npp_size: 2\n",
        "meta-dp-nan": "dp_size: .nan\npp_size: 2\n",
        "meta-dp-bool": "dp_size: true\npp_size: 2\n",
        "meta-dp-list": "dp_size: [2]\npp_size: 2\n",
        "meta-world-mismatch": meta + "world_size: 8\n",
        "meta-world-negative": meta + "world_size: -4\n",
        "meta-dp-mismatch": "dp_size: 4\npp_size: 1\n",
        "meta-bad-yaml": "dp_size: [\n",
        "meta-tab-yaml": "dp_size:\t2\n\tpp_size: 2\n",
        "meta-alias-bomb": meta + "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
        "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
        "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
        "trial_name: *f\n",
        "meta-trial-alias": meta + "x: &x [aaaaaaaaaa, bbbbbbbbbb]\ntrial_name: *x\n",
        "meta-trial-dict": meta + "trial_name: {a: 1}\n",
        "meta-trial-huge": meta + "trial_name: " + "x" * 100_000 + "\n",
        "meta-trial-newline": meta + "trial_name: \"a\\nb\\x00c\"\n",
        "meta-deep": "a: " + "[" * 5000 + "]" * 5000 + "\n" + meta,
        "meta-run-id-text": meta + "run_id: abc\n",
        "meta-python-tag": meta + "x: !!python/object:os.system {}\n",
        "meta-big-file": meta + "# " + "x" * (5 * 1024 * 1024) + "\n",
        "meta-dsp-zero": meta + "dsp_size: 0\n",
    }
    cases += [Case(k, "whatif", _whatif_meta(v)) for k, v in metas.items()]

    def devzero(d: Path, base: Base):
        return (["whatif", "--trace", str(base.run / "trace.parquet"), "--meta", "/dev/zero",
                 "--out", str(d / "out")], "/dev/zero", d / "out")
    cases.append(Case("meta-dev-zero", "whatif", devzero))

    def meta_dir(d: Path, base: Base):
        d.mkdir(parents=True)
        return (["whatif", "--trace", str(base.run / "trace.parquet"), "--meta", str(d),
                 "--out", str(d / "out")], str(d), d / "out")
    cases.append(Case("meta-is-folder", "whatif", meta_dir))
    cases += [Case(f"out-{k}", "whatif", _bad_out("whatif", k))
              for k in ("file", "under", "long", "empty")]
    return cases
