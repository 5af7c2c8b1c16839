"""The run folder and its records: the one typed view of a run folder, run.json, the per-rank
logs (compute times, CPU run-queue wait), streaming a node's files to the monitor, findings,
and the what-if result in every form it is written and read (whatif.json and its reader, the
summary both models write, the reproduction gate, the artifact's own layout).

The top contract floor: it imports only the floors below it (`method`, `scenarios`,
`trace`, `util`), never the analysis, workloads or anything above them.
"""
