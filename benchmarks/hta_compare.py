"""Compare our Kineto importer with Holistic Trace Analysis (HTA) on the same traces.

Not part of the test suite and not a dependency: HTA lives in a throwaway venv.

    python3 -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install HolisticTraceAnalysis
    /tmp/hta-venv/bin/python benchmarks/hta_compare.py RUN/kineto [RUN2/kineto ...]

For every rank: the count and summed duration of each vocabulary-named
record_function range inside the profiled steps, as HTA parses them
(TraceAnalysis(...).t.get_trace(rank), names decoded with its symbol table,
`iteration` from ProfilerStep#N) and as our parser imports them
(stragglerlab.importers.kineto, CPU timing). Prints the largest differences.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402
from hta.trace_analysis import TraceAnalysis  # noqa: E402

from stragglerlab.importers.kineto import VOCAB, find_traces, import_kineto  # noqa: E402


def hta_table(folder: str) -> pd.DataFrame:
    t = TraceAnalysis(trace_dir=folder).t
    rows = []
    for rank in t.get_ranks():
        df = t.get_trace(rank)
        names = df["name"].map(lambda i: t.symbol_table.sym_table[i])
        cats = df["cat"].map(lambda i: t.symbol_table.sym_table[i])
        keep = names.isin(VOCAB) & (cats == "user_annotation") & (df["iteration"] >= 0)
        sub = pd.DataFrame({"rank": rank, "step": df["iteration"][keep],
                            "optype": names[keep], "dur_us": df["dur"][keep]})
        rows.append(sub)
    return pd.concat(rows, ignore_index=True)


def compare(folder: str) -> pd.DataFrame:
    ours = import_kineto(find_traces(folder), timing="cpu").df
    ours = ours.assign(dur_us=ours["duration"] * 1e6, optype=ours["optype"].astype(str))
    hta = hta_table(folder)
    # HTA leaves the trace's last ProfilerStep out of its iterations: compare common steps.
    steps = set(ours["step"].unique()) & set(hta["step"].unique())
    dropped = sorted(set(ours["step"].unique()) - steps)
    print(f"{folder}: comparing steps {sorted(steps)}; only in ours: {dropped}")
    ours, hta = ours[ours["step"].isin(steps)], hta[hta["step"].isin(steps)]
    key = ["rank", "optype"]
    a = ours.groupby(key)["dur_us"].agg(["count", "sum"])
    b = hta.groupby(key)["dur_us"].agg(["count", "sum"])
    m = a.join(b, lsuffix="_ours", rsuffix="_hta", how="outer").fillna(0)
    m["count_diff"] = m["count_hta"] - m["count_ours"]
    m["sum_rel_diff"] = (m["sum_hta"] / m["sum_ours"] - 1).where(m["sum_ours"] > 0)
    return m


def main() -> int:
    for folder in sys.argv[1:]:
        m = compare(folder)
        print(f"== {folder}: {len(m)} (rank, optype) rows; count mismatches "
              f"{int((m['count_diff'] != 0).sum())}; max |sum diff| "
              f"{100 * m['sum_rel_diff'].abs().max():.4f}% "
              f"(HTA rounds ts/dur down to whole us); total |sum diff| "
              f"{(m['sum_hta'] - m['sum_ours']).abs().sum():.0f} us")
        print(m.round(4).head(16).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
