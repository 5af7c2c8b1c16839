"""`stragglerlab import kineto` of synthetic torch.profiler traces shaped like a DDP
job's (benchmarks/kineto_synth.py): 8 ranks of about 10 MB of JSON each, 6 steps, a
reduced size of production files that runs in seconds; and the op table of many small
ranks (256: 0.2 MB each, 3 steps), where a cost per op that grows with the world shows."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from .bench_detect import _cli
from .inputs import REPO


def _synth(ranks: int, mb: float, steps: int) -> Path:
    """kineto_synth.py's traces of `ranks` ranks of about `mb` MB each, in the cache folder."""
    traces = Path(f"kineto-{ranks}x{mb}mb").resolve()
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "kineto_synth.py"),
                    "--ranks", str(ranks), "--mb", str(mb), "--steps", str(steps),
                    "--out", str(traces)], check=True, stdout=subprocess.DEVNULL)
    return traces


class KinetoImport:
    timeout = 600
    number = 1
    repeat = (1, 3, 60.0)

    def setup_cache(self):
        return str(_synth(ranks=8, mb=10, steps=6))

    def time_import_kineto(self, traces):
        with tempfile.TemporaryDirectory() as tmp:
            _cli("import", "kineto", "--traces", traces, "--out", str(Path(tmp) / "run"),
                 "--quiet")

    def peakmem_import_kineto(self, traces):
        with tempfile.TemporaryDirectory() as tmp:
            _cli("import", "kineto", "--traces", traces, "--out", str(Path(tmp) / "run"),
                 "--quiet")


class KinetoManyRanks:
    timeout = 600
    number = 1
    repeat = (1, 3, 60.0)

    def setup_cache(self):
        from stragglerlab.importers.kineto_events import load_ranks

        return load_ranks(sorted(_synth(ranks=256, mb=0.2, steps=3).glob("*.json.gz")))

    def time_build_general(self, events):
        from stragglerlab.importers.kineto_general import build_general

        build_general(events)
