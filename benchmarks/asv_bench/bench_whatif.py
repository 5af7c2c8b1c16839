"""The what-if at DP 256, 1,024 and 4,096: time and peak memory.

One benchmark is the work of `stragglerlab whatif` after its imports: read and
validate the trace, run the analysis (every compute ideal), build whatif.json's
document and encode it, with the replays on one thread so that every commit's number
is the same work (the verb's `--threads` default overlaps them on two cores).
Interpreter start-up and imports are the same for every size; `benchmarks/compare.sh`
times whole processes as users run them, imports and threads included.
"""

from __future__ import annotations

from pathlib import Path

from .inputs import trace_at_dp

SIZES = [256, 1024, 4096]


class WhatIf:
    params = SIZES
    param_names = ["dp"]
    timeout = 900  # DP 4,096 (13.9 M ops) takes tens of seconds a run on a 2-core machine
    number = 1
    repeat = (1, 5, 60.0)
    rounds = 1

    def setup_cache(self):
        return {dp: trace_at_dp(dp, Path(f"dp{dp}")) for dp in SIZES}

    def _run(self, inputs, dp):
        from stragglerlab.analysis.whatif import ComputeIdeal, run_whatif
        from stragglerlab.util.atomic import dumps_json

        trace, meta = inputs[dp]
        read_trace = _the_verbs_reader()
        df, job = read_trace(trace, meta, **_as_the_verb_reads(read_trace))
        wr = run_whatif(df, job, where=trace, compute_ideal=ComputeIdeal.MEAN,
                        other_ideals=list(ComputeIdeal))
        return dumps_json(wr.result.to_json())

    def time_whatif(self, inputs, dp):
        self._run(inputs, dp)

    def peakmem_whatif(self, inputs, dp):
        self._run(inputs, dp)

    def time_read_trace(self, inputs, dp):
        """Reading and validating the trace alone (about a third of the what-if)."""
        read_trace = _the_verbs_reader()
        read_trace(*inputs[dp], **_as_the_verb_reads(read_trace))


def _the_verbs_reader():
    """The reader `stragglerlab whatif` uses on a commit: read_trace_table (numpy columns)
    where it exists, else read_trace (a DataFrame)."""
    from stragglerlab.trace import trace_io

    return getattr(trace_io, "read_trace_table", trace_io.read_trace)


def _as_the_verb_reads(read_trace) -> dict:
    """read_trace's options as `stragglerlab whatif` passes them (compact int columns), on a
    commit that has them: the suite's history compares commits before them too."""
    import inspect

    return {"compact_ints": True} if "compact_ints" in inspect.signature(read_trace).parameters \
        else {}
