"""Load time and peak memory of the general Kineto importer beside Holistic Trace Analysis
(HTA) loading the same 8-rank traces, at several sizes per rank.

    python3 -m venv .hta-venv && .hta-venv/bin/pip install \\
        HolisticTraceAnalysis==0.5.0 pandas==2.3.3       # HTA 0.5.0 breaks on pandas 3
    nice -n 10 .venv/bin/python benchmarks/hta_load_side_by_side.py \\
        --hta-python .hta-venv/bin/python --sizes 25 50 100 --repeats 2

Traces come from benchmarks/kineto_synth.py (a DDP transformer job's events
as torch.profiler writes them, gzipped, rank 3 computing 1.25x slower),
written once under --dir and reused. Each measurement is one fresh process,
started, timed and watched from here:

* `hta`: `TraceAnalysis(trace_dir=DIR)` (HTA's whole load: parse every rank
  in a pool of min(ranks, cores) forked processes, symbol table, iterations,
  alignment), in HTA's own interpreter (--hta-python; HTA is never a
  dependency of this project);
* `ours`: `load_ranks` + `build_general` (the op table; ranks read in
  parallel processes);
* `ours+whatif`: `stragglerlab import kineto --traces DIR --out OUT --quiet`,
  the CLI: load, op model, the what-if, ops.parquet/import.json/whatif.json.

Wall: the whole process, interpreter start and imports included. Peak
memory: the largest sum of the resident sets of the process and all its
descendants, sampled every --sample-ms (psutil), so parallel readers count
together; RSS counts pages a forked child shares with its parent in both (the
same for both tools). A run whose tree passes --mem-limit-gb is killed and
reported as such. Tools alternate order within each repeat; the table gives
the median and the range. Results: the table on stdout, and --out-prefix
.json / .md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from kineto_synth import write_job  # noqa: E402

MODES = ("hta", "ours", "ours+whatif")


def child(mode: str, folder: str) -> None:
    """One measurement inside a fresh process: print what was loaded as a JSON line."""
    if mode == "hta":
        import logging

        logging.disable(logging.WARNING)  # HTA logs a warning per rank and per phase
        from hta.trace_analysis import TraceAnalysis
        t = TraceAnalysis(trace_dir=folder).t
        ranks = t.get_ranks()
        print(json.dumps({"ranks": len(ranks), "iterations": len(t.get_iterations()),
                          "rows": int(sum(len(t.get_trace(r)) for r in ranks))}))
        return
    sys.path.insert(0, str(ROOT))
    from stragglerlab.importers.kineto import find_traces
    from stragglerlab.importers.kineto_general import build_general, load_ranks
    res = build_general(load_ranks(find_traces(folder)))
    print(json.dumps({"ranks": len(res.report["ranks"]), "steps": len(res.report["steps"]),
                      "ops": res.report["ops"], "events": res.report["events"]}))


def measure(cmd: list[str], sample_s: float, limit_mb: float) -> dict:
    """Run cmd; its wall time, peak tree RSS and its own stdout's last line."""
    with tempfile.TemporaryFile("w+") as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, cwd=ROOT)
        root, peak, killed = psutil.Process(p.pid), 0, False
        while p.poll() is None:
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            rss = 0
            for q in procs:
                try:
                    rss += q.memory_info().rss
                except psutil.NoSuchProcess:
                    pass
            peak = max(peak, rss)
            if rss > limit_mb * 2**20 and not killed:
                killed = True
                for q in reversed(procs):  # only this run's own processes
                    try:
                        q.kill()
                    except psutil.NoSuchProcess:
                        pass
            time.sleep(sample_s)
        wall = time.perf_counter() - t0
        out.seek(0)
        lines = out.read().strip().splitlines()
    info = {}
    if p.returncode == 0 and lines:
        try:
            info = json.loads(lines[-1])
        except json.JSONDecodeError:
            info = {"stdout": lines[-1][:200]}
    return {"wall_s": wall, "peak_mb": peak / 2**20, "rc": p.returncode,
            "over_limit": killed, **info}


def command(mode: str, folder: Path, hta_python: str, out: Path) -> list[str]:
    if mode == "hta":
        return [hta_python, __file__, "--child", mode, str(folder)]
    if mode == "ours":
        return [sys.executable, __file__, "--child", mode, str(folder)]
    return [str(Path(sys.executable).with_name("stragglerlab")), "import", "kineto",
            "--traces", str(folder), "--out", str(out), "--quiet"]


def spread(xs: list[float], fmt: str) -> str:
    if not xs:
        return "-"
    if len(xs) == 1:
        return format(xs[0], fmt)
    return f"{format(statistics.median(xs), fmt)} ({format(min(xs), fmt)}-" \
           f"{format(max(xs), fmt)})"


def _ratio(med: dict, a: str, b: str, i: int, inv: bool = False) -> str:
    """med[a] / med[b] of field i (time: 'x faster'), or med[b] / med[a] (memory share)."""
    if not (med[a] and med[b]):
        return "-"
    return f"{med[b][i] / med[a][i]:.2f}" if inv else f"{med[a][i] / med[b][i]:.2f}x"


def table(rows: list[dict]) -> str:
    head = ("| MB JSON / rank (gz) | events / rank | HTA wall s | HTA peak MiB | ours wall s "
            "| ours peak MiB | ours+what-if wall s | ours+what-if peak MiB | HTA / ours time "
            "| ours / HTA memory | HTA / (ours+what-if) time | (ours+what-if) / HTA memory |")
    lines = [head, "|" + "---:|" * 12]
    for r in rows:
        m = {k: [x for x in r["runs"] if x["mode"] == k and x["rc"] == 0] for k in MODES}
        med = {k: (statistics.median(x["wall_s"] for x in v),
                   statistics.median(x["peak_mb"] for x in v)) if v else None
               for k, v in m.items()}
        cells = [f"{r['json_mb']:.0f} ({r['gz_mb']:.0f})", f"{r['events']:,}"]
        for k in MODES:
            cells += [spread([x["wall_s"] for x in m[k]], ".1f"),
                      spread([x["peak_mb"] for x in m[k]], ".0f")]
        cells += [_ratio(med, "hta", "ours", 0), _ratio(med, "hta", "ours", 1, inv=True),
                  _ratio(med, "hta", "ours+whatif", 0),
                  _ratio(med, "hta", "ours+whatif", 1, inv=True)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[25, 50, 100],
                    help="JSON MB per rank (about)")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--dir", default="/tmp/stragglerlab-hta-bench")
    ap.add_argument("--hta-python", default=os.environ.get("STRAGGLERLAB_HTA_PYTHON"),
                    help="interpreter of a venv with Holistic Trace Analysis installed "
                         "(default: $STRAGGLERLAB_HTA_PYTHON)")
    ap.add_argument("--sample-ms", type=float, default=20.0)
    ap.add_argument("--mem-limit-gb", type=float, default=12.0)
    ap.add_argument("--out-prefix", default=str(ROOT / "benchmarks" / "hta_load_side_by_side"))
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(*a.child)
        return
    if a.hta_python is None and any(m.startswith("hta") for m in a.modes):
        ap.error("the hta modes need --hta-python (or $STRAGGLERLAB_HTA_PYTHON): a venv's "
                 "interpreter with Holistic Trace Analysis installed")
    rows = []
    for mb in a.sizes:
        folder = Path(a.dir) / f"{a.ranks}x{mb:g}mb"
        files = write_job(folder, a.ranks, mb, a.steps)
        size = _json_bytes(files[0])
        row = {"mb_target": mb, "json_mb": size / 1e6, "ranks": a.ranks, "steps": a.steps,
               "gz_mb": files[0].stat().st_size / 1e6, "events": 0, "runs": []}
        print(f"== {a.ranks} ranks x {row['json_mb']:.0f} MB JSON ({row['gz_mb']:.0f} MB gz)",
              flush=True)
        for rep in range(a.repeats):
            order = a.modes if rep % 2 == 0 else a.modes[::-1]
            for mode in order:
                r = measure(command(mode, folder, a.hta_python, Path(a.dir) / "out"),
                            a.sample_ms / 1e3, a.mem_limit_gb * 1024)
                r.update(mode=mode, repeat=rep)
                row["events"] = max(row["events"], r.get("events", 0) // a.ranks)
                row["runs"].append(r)
                print(json.dumps(r), flush=True)
        rows.append(row)
    md = table(rows)
    print(md)
    meta = {"host_cores": os.cpu_count(), "load_avg_end": os.getloadavg(),
            "cmd": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                             time.gmtime())}
    Path(a.out_prefix + ".json").write_text(json.dumps({**meta, "rows": rows}, indent=1))
    Path(a.out_prefix + ".md").write_text(f"`{meta['cmd']}` ({meta['date']}, "
                                          f"{meta['host_cores']} cores)\n\n{md}\n")


def _json_bytes(path: Path) -> int:
    import gzip
    with gzip.open(path, "rb") as f:
        return sum(len(b) for b in iter(lambda: f.read(1 << 24), b""))


if __name__ == "__main__":
    main()
