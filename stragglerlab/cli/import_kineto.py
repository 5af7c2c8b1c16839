"""`stragglerlab import kineto`: turn per-rank PyTorch profiler traces into a trace we analyse.

    stragglerlab import kineto --traces run/kineto --out imported [--layout dp=2,pp=2]
    stragglerlab whatif --trace imported/trace.parquet --meta imported/meta.yaml --out wi

Reads one torch.profiler Chrome-trace JSON per rank (gzipped or not; a folder
or a glob) and writes into --out `trace.parquet` (our schema), `meta.yaml`
(the job meta) and `import.json` (schema "stragglerlab.import/1", files,
layout and where it came from, timing, per-rank clock offsets, steps kept);
--out is required (the run folder it makes). Progress with ETA goes to
stderr, the summary to stdout (with --quiet too). The parser is
stragglerlab/importers/kineto.py; README "Analyzing your own training job"
says which record_function names a job needs.
"""

from __future__ import annotations

import argparse

from stragglerlab.cli.common import examples, out_folder

IMPORT_SCHEMA = "stragglerlab.import/1"
"""The `schema` value of import.json."""


def add_parser(sub, name: str) -> argparse.ArgumentParser:
    """Register the verb's flags (the CLI root adds --quiet)."""
    p = sub.add_parser(name, help="import traces of other tools (PyTorch profiler / Kineto)",
                       epilog=examples(
                           "stragglerlab import kineto --traces examples/kineto-dp2-pp2 "
                           "--out /tmp/imported",
                           "stragglerlab import kineto --traces 'run/kineto/rank*.json.gz' "
                           "--layout dp=2,pp=2 --out imported"))
    p.add_argument("format", choices=["kineto"], metavar="FORMAT",
                   help="trace format; one so far: kineto (torch.profiler Chrome-trace JSON, "
                        "one file per rank), as in `stragglerlab import kineto --traces ...`")
    p.add_argument("--traces", required=True, metavar="DIR|GLOB",
                   help="folder of per-rank traces (*.json, *.json.gz) or a glob pattern")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="run folder to write (required); writes trace.parquet, meta.yaml, "
                        "import.json")
    p.add_argument("--layout", metavar="dp=N,pp=M[,tp=K]",
                   help="parallel layout in Megatron rank order (rank = (stage*dp + dp_rank)*tp"
                        " + tp_rank); default: from the traces' process groups (pg_config)")
    p.add_argument("--timing", choices=["cpu", "gpu", "auto"], default="auto",
                   help="op spans from CPU ranges or GPU kernels (auto: GPU when the traces "
                        "hold kernels)")
    p.add_argument("--align", choices=["auto", "none", "collective", "step"], default="auto",
                   help="clock alignment: none = trust the clocks; collective = align the "
                        "ends of the optimizer-clip-main-grad all-reduce (median over steps); "
                        "step = align the first ProfilerStep starts; auto = none when "
                        "all traces come from one host, else collective")
    p.add_argument("--allow-partial", action="store_true",
                   help="accept missing steps (keep those every rank has) and missing ranks "
                        "(keep the DP replicas with every stage)")
    return p


def run(args) -> int:
    """Import, write trace.parquet, meta.yaml and import.json, print a summary."""
    from stragglerlab.atomic import atomic_write_json
    from stragglerlab.cli.progress import Reporter
    from stragglerlab.importers.kineto import find_traces, import_kineto
    from stragglerlab.importers.layout import Layout
    from stragglerlab.trace_io import write_trace

    out = out_folder(args.out)
    layout = Layout.parse(args.layout) if args.layout else None
    files = find_traces(args.traces)
    from stragglerlab.atomic import staged_folder

    with Reporter(quiet=args.quiet) as progress:
        parsed = progress.task("rank trace", total=len(files))
        res = import_kineto(files, layout=layout, timing=args.timing,
                            allow_partial=args.allow_partial, align=args.align,
                            progress=parsed)
        progress(f"merged {res.report['ops']:,} ops; writing {out}/")
        with staged_folder(out) as tmp:  # all three files or none
            write_trace(res.df, res.meta, tmp / "trace.parquet")
            res.meta.dump(tmp / "meta.yaml")
            atomic_write_json(tmp / "import.json", {"schema": IMPORT_SCHEMA, **res.report})
    r = res.report
    # The result: stdout, --quiet or not.
    lay = r["layout"]
    print(f"imported {r['ops']:,} ops from {len(r['files'])} rank traces: "
          f"dp={res.meta.dp_size} pp={res.meta.pp_size} tp={lay['tp']} "
          f"(layout from {lay['source']}), steps {r['steps'][0]}..{r['steps'][-1]} "
          f"({len(r['steps'])}), timing {r['timing']}")
    offsets = ", ".join(f"rank {k} {1e3 * v:+.3f} ms" for k, v in r["clock_offsets_s"].items())
    print(f"clock alignment ({r['align']}): {offsets}")
    if r["unfinished_ranges_dropped"]:
        print(f"left out {r['unfinished_ranges_dropped']} ranges that never closed")
    print(f"wrote {out}/trace.parquet, meta.yaml, import.json")
    return 0
