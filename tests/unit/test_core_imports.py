"""The what-if core and the CLI's analysis path import neither torch nor ray."""

from __future__ import annotations

import subprocess
import sys

CORE = [
    "stragglerlab.cli", "stragglerlab.trace.trace_io", "stragglerlab.trace.validate",
    "stragglerlab.analysis.graph", "stragglerlab.analysis.frame",
    "stragglerlab.analysis.simulate", "stragglerlab.analysis.whatif",
    "stragglerlab.analysis.timeline", "stragglerlab.figures.fig14_heatmap",
]


def test_core_does_not_import_torch_or_ray():
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in CORE)
        + "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'ray'))\n"
        + "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"heavy imports: {out.stdout}"
