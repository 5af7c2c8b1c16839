"""Benchmark: `stragglerlab whatif` time and peak memory vs trace size, beside the artifact's tool.

Builds larger traces by replicating trace-ST's DP ranks (dp = 16, 64, 256,
1024; 4 stages; 32 steps; ~3.5M ops at 1024), runs the whole CLI process on
each and reports wall time, peak resident memory (each child's own
ru_maxrss, from os.wait4) and that the slowdown equals trace-ST's (copies of
DP ranks change no number).

Given a checkout of the paper's artifact (ByteDance-Seed/StragglerAnalysis;
kept outside this repository), it also runs the artifact's `analyzer/wia.py`
as a whole process on the same traces, with an interpreter that has the
artifact's requirements, and reports the speed ratio (artifact / ours) and
whether both give the same slowdown (artifact's blocking_slowdown vs our
whatif.json slowdown). The artifact grows quadratically in dp, so it is
skipped above --artifact-max-dp.

    python benchmarks/bench_whatif.py [--dp 16 64 256 1024] [--repeats 3]
        [--artifact DIR] [--artifact-python PATH] [--artifact-max-dp 256]
        [--timelines] [--out benchmarks/data]

--artifact defaults to $STRAGGLERLAB_ARTIFACT, --artifact-python to
$STRAGGLERLAB_ARTIFACT_PYTHON, else this interpreter.

Prints a Markdown table (pasted into benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "tests" / "data" / "reference-traces"
REL_TOL = 1e-6


def replicate(df: pd.DataFrame, meta: dict, dp: int) -> tuple[pd.DataFrame, dict]:
    """Copy the DP ranks of df until there are dp of them; ranks renumbered dp-major."""
    dp0, pp = meta["dp_size"], meta["pp_size"]
    copies = dp // dp0
    parts = []
    for c in range(copies):
        part = df.copy()
        part["dp_rank"] = (part["dp_rank"].astype(np.int64) + c * dp0).astype(np.int16)
        parts.append(part)
    out = pd.concat(parts, ignore_index=True)
    out["rank"] = (out["stage"].astype(np.int64) * dp + out["dp_rank"]).astype(np.int32)
    new_meta = dict(meta, dp_size=dp, world_size=dp * pp * meta["tp_size"] * meta["dsp_size"])
    return out, new_meta


def run_measured(cmd: list[str], cwd: Path, log: Path,
                 env: dict | None = None) -> tuple[int, float, float]:
    """Run cmd as a child process; return (exit code, wall seconds, peak RSS MiB of that child).

    The child is reaped with os.wait4, whose rusage is the child's own (ru_maxrss
    of RUSAGE_CHILDREN would be the maximum over every child so far).
    """
    with open(log, "w") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    # reaped here: keep Popen from waiting again
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, wall, usage.ru_maxrss / 1024  # Linux: KiB


def run_ours(trace: Path, meta: Path, out: Path, timelines: bool) -> dict:
    cmd = [sys.executable, "-m", "stragglerlab", "whatif", "--trace", str(trace),
           "--meta", str(meta), "--out", str(out), "--quiet"]
    if timelines:
        cmd.append("--timelines")
    out.mkdir(parents=True, exist_ok=True)
    log = out.parent / "ours.log"
    rc, wall, peak = run_measured(cmd, REPO, log)
    if rc != 0:
        raise SystemExit(f"whatif failed on {trace} (exit {rc}):\n{log.read_text()[-4000:]}")
    result = json.loads((out / "whatif.json").read_text())
    return {"wall_s": wall, "peak_mib": peak, "slowdown": result["slowdown"]}


def run_artifact(artifact: Path, python: str, trace: Path, meta: Path, out: Path,
                 trial_name: str) -> dict:
    """The artifact's entry point, as its run_all.sh calls it (without --root: no
    dumps of the intermediate dataframes), importable through PYTHONPATH."""
    cmd = [python, str(artifact / "analyzer" / "wia.py"), "--metadata", str(meta),
           "--trace", str(trace), "--dump-dir", str(out)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(artifact), env.get("PYTHONPATH")) if p)
    env.setdefault("MPLBACKEND", "Agg")
    out.mkdir(parents=True, exist_ok=True)
    result_file = out / f"{trial_name}.json"
    result_file.unlink(missing_ok=True)
    log = out.parent / "artifact.log"
    rc, wall, peak = run_measured(cmd, artifact, log, env)
    if rc != 0:
        raise SystemExit(f"artifact wia.py failed on {trace} (exit {rc}):\n"
                         f"{log.read_text()[-4000:]}")
    result = json.loads(result_file.read_text())
    return {"wall_s": wall, "peak_mib": peak, "slowdown": result["blocking_slowdown"]}


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def fmt(s: dict | None, digits: int) -> str:
    if s is None:
        return "–"
    if s["n"] == 1:
        return f"{s['median']:.{digits}f}"
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}–{s['max']:.{digits}f})"


def same(a: float, b: float) -> bool:
    return abs(a / b - 1) < REL_TOL


def main() -> None:
    import yaml

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dp", type=int, nargs="+", default=[16, 64, 256, 1024])
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "data"))
    ap.add_argument("--timelines", action="store_true",
                    help="pass --timelines to stragglerlab whatif (Perfetto timelines are opt-in)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="runs per tool and size; the table reports the median and min–max")
    ap.add_argument("--artifact", default=os.environ.get("STRAGGLERLAB_ARTIFACT"),
                    help="checkout of ByteDance-Seed/StragglerAnalysis "
                         "(default $STRAGGLERLAB_ARTIFACT)")
    ap.add_argument("--artifact-python",
                    default=os.environ.get("STRAGGLERLAB_ARTIFACT_PYTHON") or sys.executable,
                    help="interpreter with the artifact's requirements "
                         "(default $STRAGGLERLAB_ARTIFACT_PYTHON, else this one)")
    ap.add_argument("--artifact-max-dp", type=int, default=256,
                    help="skip the artifact above this dp (it grows quadratically in dp)")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    if not (REFERENCE / "trace-ST.parquet").exists():
        raise SystemExit(f"reference traces not found at {REFERENCE}")

    artifact = Path(args.artifact).resolve() if args.artifact else None
    if artifact is None:
        print("artifact: not given (--artifact or $STRAGGLERLAB_ARTIFACT); measuring ours only",
              file=sys.stderr)
    elif not (artifact / "analyzer" / "wia.py").is_file():
        raise SystemExit(f"--artifact {artifact}: no analyzer/wia.py there")

    base = pd.read_parquet(REFERENCE / "trace-ST.parquet")
    meta = yaml.safe_load((REFERENCE / "meta-ST.yaml").read_text())
    expected = json.loads((REFERENCE / "result-ST.json").read_text())["blocking_slowdown"]
    out_root = Path(args.out)
    load_before = os.getloadavg()
    rows = []
    for dp in sorted(args.dp):
        df, m = replicate(base, meta, dp)
        folder = out_root / f"dp{dp}"
        folder.mkdir(parents=True, exist_ok=True)
        df.to_parquet(folder / "trace.parquet", index=False)
        (folder / "meta.yaml").write_text(yaml.safe_dump(m, sort_keys=False))
        with_artifact = artifact is not None and dp <= args.artifact_max_dp
        ours, theirs = [], []
        for i in range(args.repeats):  # alternate the tools so load drifts hit both alike
            ours.append(run_ours(folder / "trace.parquet", folder / "meta.yaml", folder / "out",
                                 timelines=args.timelines))
            print(f"dp={dp:5d} run {i + 1}/{args.repeats} ours     wall={ours[-1]['wall_s']:7.2f}s "
                  f"peak={ours[-1]['peak_mib']:7.1f} MiB S={ours[-1]['slowdown']:.7f} "
                  f"load={os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
            if with_artifact:
                theirs.append(run_artifact(artifact, args.artifact_python, folder / "trace.parquet",
                                           folder / "meta.yaml", folder / "artifact-out",
                                           m["trial_name"]))
                print(f"dp={dp:5d} run {i + 1}/{args.repeats} artifact "
                      f"wall={theirs[-1]['wall_s']:7.2f}s "
                      f"peak={theirs[-1]['peak_mib']:7.1f} MiB S={theirs[-1]['slowdown']:.7f} "
                      f"load={os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
        if artifact is not None and not with_artifact:
            print(f"dp={dp:5d} artifact skipped (dp > --artifact-max-dp {args.artifact_max_dp})",
                  file=sys.stderr, flush=True)
        s_ours = {r["slowdown"] for r in ours}
        s_theirs = {r["slowdown"] for r in theirs}
        ours_ok = all(same(s, expected) for s in s_ours)
        row = {
            "dp": dp, "ops": len(df),
            "ours_wall": summary([r["wall_s"] for r in ours]),
            "ours_peak": summary([r["peak_mib"] for r in ours]),
            "art_wall": summary([r["wall_s"] for r in theirs]) if theirs else None,
            "art_peak": summary([r["peak_mib"] for r in theirs]) if theirs else None,
            "s_ours": sorted(s_ours), "s_artifact": sorted(s_theirs),
        }
        if theirs:
            ok = ours_ok and all(same(a, b) for a in s_theirs for b in s_ours)
            row["same_s"] = "yes" if ok else "NO"
            row["ratio"] = row["art_wall"]["median"] / row["ours_wall"]["median"]
        else:
            row["same_s"] = "= trace-ST" if ours_ok else "NO"
            row["ratio"] = None
        rows.append(row)
    load_after = os.getloadavg()

    print(f"\n{args.repeats} run(s) per tool and size; median (min–max). "
          f"Timelines: {'on' if args.timelines else 'off'}. CPUs: {os.cpu_count()}. "
          f"Load average (1/5/15 min) before: {'/'.join(f'{x:.2f}' for x in load_before)}, "
          f"after: {'/'.join(f'{x:.2f}' for x in load_after)}.")
    if artifact is not None:
        print(f"Artifact: {artifact}/analyzer/wia.py with {args.artifact_python}.")
    print("\n| dp | ops | ours wall (s) | ours peak RSS (MiB) | artifact wall (s) "
          "| artifact peak RSS (MiB) | speed ratio (artifact / ours) | same S |")
    print("|---:|---:|---:|---:|---:|---:|---:|:---:|")
    for r in rows:
        ratio = f"{r['ratio']:.1f}×" if r["ratio"] is not None else "–"
        print(f"| {r['dp']} | {r['ops']:,} | {fmt(r['ours_wall'], 2)} | {fmt(r['ours_peak'], 0)} | "
              f"{fmt(r['art_wall'], 2)} | {fmt(r['art_peak'], 0)} | {ratio} | {r['same_s']} |")
    print(f"\nS: ours {', '.join(f'{s:.7f}' for r in rows for s in r['s_ours'][:1])}; "
          f"trace-ST published {expected:.7f}"
          + ("; artifact " + ", ".join(f"{r['s_artifact'][0]:.7f}" for r in rows if r["s_artifact"])
             if any(r["s_artifact"] for r in rows) else ""))
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        print(f"ours: size x{b['ops'] / a['ops']:.0f} -> time x"
              f"{b['ours_wall']['median'] / a['ours_wall']['median']:.1f}")
        measured = [r for r in rows if r["art_wall"] is not None]
        if len(measured) > 1:
            a, b = measured[0], measured[-1]
            print(f"artifact: size x{b['ops'] / a['ops']:.0f} -> time x"
                  f"{b['art_wall']['median'] / a['art_wall']['median']:.1f}")


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    main()
