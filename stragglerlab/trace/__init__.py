"""The trace and the job it came from: the trace schema, the job meta, reading, writing and
checking a trace, the per-rank trace parts, a rank's host-device trace, and the general op
model of an unannotated import (its op table and the per-step view of it).

Imports only `stragglerlab.util`.
"""
