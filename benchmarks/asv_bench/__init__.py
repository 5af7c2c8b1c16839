"""The asv suite: the work users wait for (what-if, detect), timed and sized per commit.

Inputs are built by the suite (setup_cache), never downloaded: trace-ST from the
reference traces beside the repository replicated to the DP size asked for, as
benchmarks/bench_whatif.py does, or, where those traces are absent (a bare
clone), the synthetic job of stragglerlab.workloads.synthetic at that DP size.
"""
