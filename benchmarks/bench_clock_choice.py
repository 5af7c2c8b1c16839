"""Cost of `import kineto`'s clock choice where traces name no host (importers/general_groups):
the op model built with `--align auto` (both hypotheses grouped) against `none`, on the
same events, file reading left out.

    python benchmarks/kineto_synth.py --ranks 64 --mb 2 --steps 6 --out /tmp/synth64
    python benchmarks/bench_clock_choice.py /tmp/synth64 [--repeats 3]
"""

from __future__ import annotations

import argparse
import glob
import time

from stragglerlab.importers.kineto_general import build_general, load_ranks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="per-rank traces (rank*.json[.gz]) that name no host")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    events = load_ranks(sorted(glob.glob(args.folder + "/rank*.json*")))
    print(f"{len(events)} ranks, hosts named: {sorted({e.host for e in events} - {''})}")
    for rep in range(args.repeats):
        for align in ("none", "auto"):
            t0 = time.perf_counter()
            res = build_general(events, align=align)
            dt = time.perf_counter() - t0
            print(f"repeat {rep} --align {align:<4} -> {res.report['align']:<10} {dt:.3f} s "
                  f"({res.report['ops']} ops, {res.report['groups']} groups)")


if __name__ == "__main__":
    main()
