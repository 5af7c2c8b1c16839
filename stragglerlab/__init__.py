"""stragglerlab: a testbed and the OSDI'25 what-if analysis for stragglers in large-model
training.

    import stragglerlab
    job = stragglerlab.open("examples/slow-worker")     # stragglerlab.api.Job
    job.summary(); job.workers(); job.detect("whatif"); job.heatmap()

The command line is `stragglerlab` (stragglerlab.cli); nothing heavy is imported until used.
"""

from __future__ import annotations


def open(path, meta=None):  # noqa: A001 - stragglerlab.open, as one opens a file
    """The analysed job at `path`: a run folder, or a trace .parquet with its `meta` YAML
    (stragglerlab.api.Job: DataFrames and figures out, each computed once)."""
    from stragglerlab.api import open_job

    return open_job(path, meta)
