"""The run-folder contract: one typed view of one run folder that every consumer reads through.

A run folder (Snakemake layout `results/<scenario>/<seed>/`) holds:

    trace.parquet           the trace (design.md §3), job meta embedded  -> RunFolder.trace()
    meta.yaml               job meta, the artifact's format               -> .meta (JobMeta)
    faults.json             ground truth, a JSON list ([] = clean)        -> .faults (FaultRecord)
    run.json                runtime record (outcome, error, steps, ...)   -> .record (RunRecord)
    scenario.yaml           the scenario as run, when written             -> .scenario_path
    whatif/whatif.json      the what-if result (WhatIfResult.to_json)     -> .whatif (dict),
                                                                             .whatif_record()
    detect/<det>.json       a detector's findings (offline)               -> .findings(det)
    detect/<det>-online.json  ... replayed step by step                   -> .findings(det, True)
    trace-parts/rank<r>.bin raw per-rank op records (stragglerlab.trace.trace_parts)
    gc/rank<r>.jsonl        raw per-rank GC pause log
    cpu/rank<r>.jsonl       per-rank, per-step CPU run-queue wait (stragglerlab.run.run_queue_log)
    status/rank<r>.json     live per-rank progress (write_status)         -> .status()
    driver.json             the running driver (stragglerlab.workloads.killed_run)

Each file has one reader and one writer (here or in its record's module:
faults.read_faults, run_record.read_run_record, findings.read_findings). A
bad file (missing, too big, not UTF-8, not JSON/YAML, wrong shape or type,
ranks outside the job, last_step < first_step, non-finite numbers) raises one
InputError naming the file, the field and the fix. Reads are cached per
RunFolder object.

    folder = RunFolder.open("results/slow-worker-1/0")
    df = folder.trace()                       # validated DataFrame
    folder.meta.dp_size, folder.record.outcome, [f.kind for f in folder.faults]
    if folder.has_findings("whatif"):
        findings = folder.findings("whatif")
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from stragglerlab.run.findings import Finding, FindingsDocument, read_findings, write_findings
from stragglerlab.run.run_record import RunRecord, read_run_record, write_run_record
from stragglerlab.run.whatif_record import WhatIfRecord, check_document
from stragglerlab.scenarios.faults import FaultRecord, read_faults, write_faults
from stragglerlab.trace.meta import JobMeta
from stragglerlab.util.atomic import atomic_write_json
from stragglerlab.util.errors import InputError
from stragglerlab.util.filecheck import entry_problem, finite_or_none, load_json, load_yaml

if TYPE_CHECKING:
    import pandas as pd

TRACE_PARQUET = "trace.parquet"
META_YAML = "meta.yaml"
FAULTS_JSON = "faults.json"
RUN_JSON = "run.json"
SCENARIO_YAML = "scenario.yaml"
WHATIF_DIR = "whatif"
WHATIF_JSON = f"{WHATIF_DIR}/whatif.json"
DETECT_DIR = "detect"
TRACE_PARTS_DIR = "trace-parts"
GC_DIR = "gc"
CPU_DIR = "cpu"
STATUS_DIR = "status"
DRIVER_JSON = "driver.json"
"""The running driver's record (host, process mark, scenario), written as `train` starts
and removed once the run folder is written: left behind, the driver was killed
(stragglerlab.workloads.killed_run)."""
KINETO_DIR = "kineto"
"""torch.profiler traces, rank<r>.json.gz (run.profiler: kineto)."""
COMPUTE_DIR = "compute"
"""Per-rank compute logs of the torch-wrapper workloads (stragglerlab/run/compute_log.py)."""
MONITOR_DIR = "monitor"
"""The one folder of a run folder the monitor writes (everything else it only reads)."""
PLOT_DIR = "plot"
"""`stragglerlab plot --run DIR`'s default output."""

WHATIF_FIX = "rerun `stragglerlab whatif --run <run folder>` to rewrite it"
META_FIX = "fix the sizes (dp_size, pp_size, ...) or rerun `stragglerlab train`"


STATUS_SETTLED_NS = 100_000_000
"""A status file read this long after its mtime (ns) is kept by `RunFolder.status`'s
`seen` (file systems stamp mtimes in ticks of a few ms)."""


def write_status(path: str | Path, payload: bytes, mark_folder: bool = True) -> None:
    """Write a rank's status file (status/rank<r>.json, a JSON object) in place; then, with
    `mark_folder`, set its folder's mtime. The one writer of the file: the rank once per
    step, the node stream's receiver once per step it carries (it marks the folder once
    per round of the nodes' batches, `PartReceiver.mark_statuses`).

    A rename per file costs ext4 about 0.2 ms (it flushes a file renamed over another),
    20 times this write, and at 1,024 ranks on a node's few cores that is a visible part
    of a step's lag to the monitor. So: one write from byte 0, padded with spaces (JSON
    whitespace) to the old length, never truncated. A reader racing it reads the old
    object, the new one, or a mix of their bytes: invalid JSON, which `RunFolder.status`
    skips until its next look, or fields of either version, so never a step past the new
    one, whose records its writer wrote before it. A rename would have changed the
    folder's mtime, which is what the monitor's wait watches (stragglerlab.monitor.news):
    `mark_folder` sets it.

    Raises OSError when something other than a regular file is in its place: a pipe is not
    waited on, a link is not written through."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, flags, 0o644)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.pwrite(fd, payload.ljust(st.st_size, b" "), 0)
    finally:
        os.close(fd)
    if mark_folder:
        mark_status_folder(path.parent)


def mark_status_folder(folder: str | Path) -> None:
    """Set the status folder's mtime to now (`write_status`); a folder this process may not
    touch leaves the monitor to its --poll."""
    with contextlib.suppress(OSError):
        os.utime(folder)


def _not_something_else(path: Path, what: str) -> None:
    """InputError when `path` exists but is no regular file (a folder, a pipe, a device):
    skipping it would silently take another source of the same data."""
    if path.is_symlink() and not path.exists():
        return  # a dangling link reads as absent here (has_meta names its own)
    if problem := entry_problem(path):
        raise InputError(f"{problem}; replace it with {what}, or remove it", str(path))


def read_meta(path: str | Path) -> JobMeta:
    """meta.yaml (the artifact's job meta format), validated."""
    return JobMeta.from_dict(load_yaml(path, "job meta (meta.yaml)", META_FIX), str(path))


def write_meta(path: str | Path, meta: JobMeta) -> None:
    """Write meta.yaml atomically (no schema key: the artifact reads this file too)."""
    meta.dump(path)


def read_whatif(path: str | Path,
                meta: JobMeta | None = None) -> tuple[dict, WhatIfRecord | None]:
    """whatif.json as a checked dict (WhatIfResult.to_json layout) and the record that
    checked it (None for the layout before schema versions), by the one reader's checks
    (`whatif_record.check_document`: the same as `plot`'s); `meta`, the folder's
    meta.yaml, when known: the file must be of the same job.

    A document of the layout before schema versions whose `slowdown` is null is a
    marker for a run the analysis could not handle; it is returned as is (callers test
    `doc["slowdown"]`).
    """
    raw = load_json(path, "what-if result (whatif.json)", WHATIF_FIX)
    return check_document(raw, str(path), meta)


def write_whatif(path: str | Path, doc: dict) -> None:
    """Write whatif.json atomically (strict JSON). The document's `schema` is its own
    (WhatIfResult.to_json writes it): stamping the current one on a document of the older
    layout would make the reader check it as what it is not."""
    atomic_write_json(path, finite_or_none(doc))


@dataclass(frozen=True, kw_only=True)
class RunFolder:
    """One run folder: its paths, and its files read (validated, cached) on first use."""

    path: Path
    """The run folder."""
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    """Files already read."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @classmethod
    def open(cls, path: str | Path) -> RunFolder:
        """A RunFolder of an existing folder; InputError otherwise."""
        p = Path(path)
        if not p.is_dir():
            raise InputError("run folder not found (pass a folder written by `stragglerlab "
                             "train`, e.g. results/<scenario>/<seed>)", str(p))
        return cls(path=p)

    # -- paths ------------------------------------------------------------------------
    @property
    def trace_path(self) -> Path:
        """trace.parquet."""
        return self.path / TRACE_PARQUET

    @property
    def meta_path(self) -> Path:
        """meta.yaml."""
        return self.path / META_YAML

    @property
    def faults_path(self) -> Path:
        """faults.json."""
        return self.path / FAULTS_JSON

    @property
    def record_path(self) -> Path:
        """run.json."""
        return self.path / RUN_JSON

    @property
    def scenario_path(self) -> Path:
        """scenario.yaml."""
        return self.path / SCENARIO_YAML

    @property
    def whatif_dir(self) -> Path:
        """whatif/ (whatif.json, heatmap, timelines, artifact-format/)."""
        return self.path / WHATIF_DIR

    @property
    def whatif_path(self) -> Path:
        """whatif/whatif.json."""
        return self.path / WHATIF_JSON

    @property
    def detect_dir(self) -> Path:
        """detect/ (findings files)."""
        return self.path / DETECT_DIR

    def findings_path(self, detector: str, online: bool = False) -> Path:
        """detect/<detector>.json, or detect/<detector>-online.json."""
        return self.detect_dir / f"{detector}{'-online' if online else ''}.json"

    def trace_part_path(self, rank: int) -> Path:
        """trace-parts/rank<r>.bin."""
        return self.path / TRACE_PARTS_DIR / f"rank{rank}.bin"

    def gc_log_path(self, rank: int) -> Path:
        """gc/rank<r>.jsonl."""
        return self.path / GC_DIR / f"rank{rank}.jsonl"

    def cpu_log_path(self, rank: int) -> Path:
        """cpu/rank<r>.jsonl."""
        return self.path / CPU_DIR / f"rank{rank}.jsonl"

    def status_path(self, rank: int) -> Path:
        """status/rank<r>.json."""
        return self.path / STATUS_DIR / f"rank{rank}.json"

    # -- presence ---------------------------------------------------------------------
    @property
    def has_trace(self) -> bool:
        """trace.parquet exists."""
        return self.trace_path.is_file()

    @property
    def has_meta(self) -> bool:
        """meta.yaml exists; InputError when it is a symbolic link to nothing (dangling or
        looping): the trace's embedded meta silently taken instead would hide the break."""
        if self.meta_path.is_file():
            return True
        if self.meta_path.is_symlink() and not self.meta_path.exists():
            try:
                target = str(self.meta_path.readlink())
            except OSError:
                target = "?"
            raise InputError(f"{META_YAML} is a symbolic link to {target}, which does not "
                             "resolve (a dangling or looping link); point it at the job's "
                             f"{META_YAML} or remove it", str(self.meta_path))
        _not_something_else(self.meta_path, f"the job's {META_YAML}")
        return False

    @property
    def has_faults(self) -> bool:
        """faults.json exists."""
        return self.faults_path.is_file()

    @property
    def has_record(self) -> bool:
        """run.json exists."""
        return self.record_path.is_file()

    @property
    def has_whatif(self) -> bool:
        """whatif/whatif.json exists (InputError when something else has its name)."""
        if self.whatif_path.is_file():
            return True
        _not_something_else(self.whatif_path, "the what-if result (`stragglerlab whatif "
                            f"--run {self.path}` writes it)")
        return False

    def has_findings(self, detector: str, online: bool = False) -> bool:
        """The detector's findings file exists."""
        return self.findings_path(detector, online).is_file()

    # -- readers ----------------------------------------------------------------------
    def _cached(self, key: str, read):
        if key not in self._cache:
            self._cache[key] = read()
        return self._cache[key]

    def _trace_and_meta(self) -> tuple[pd.DataFrame, JobMeta]:
        from stragglerlab.trace.trace_io import read_trace

        if not self.has_trace:
            from stragglerlab.run.general_record import general_detect_message, is_general_import

            if is_general_import(self.path):
                raise InputError(general_detect_message(self.path))
            raise InputError(f"no {TRACE_PARQUET}; pass a run folder written by `stragglerlab "
                             f"train` (or one holding {TRACE_PARQUET} + {META_YAML})",
                             str(self.path))
        return self._cached("trace", lambda: read_trace(
            self.trace_path, self.meta_path if self.has_meta else None))

    def trace(self) -> pd.DataFrame:
        """The validated trace (stragglerlab.trace.trace_io.read_trace, meta.yaml when present)."""
        return self._trace_and_meta()[0]

    @property
    def is_general_import(self) -> bool:
        """An unannotated import (`import kineto`'s general op model): ops.parquet, no
        trace.parquet."""
        from stragglerlab.run.general_record import is_general_import

        return is_general_import(self.path)

    def ops(self) -> pd.DataFrame:
        """An unannotated import's op table, checked (stragglerlab.trace.ops_table.read_ops)."""
        from stragglerlab.run.general_record import OPS_PARQUET
        from stragglerlab.trace.ops_table import read_ops

        return self._cached("ops", lambda: read_ops(
            self.path / OPS_PARQUET, again="import the traces again with `stragglerlab "
            f"import kineto --traces ... --out {self.path}`"))

    def step_view(self) -> pd.DataFrame:
        """An unannotated import's per-rank compute and communication spans per step
        (stragglerlab.trace.step_view): what the detectors that need no op names read."""
        from stragglerlab.trace.step_view import step_view

        return self._cached("step_view", lambda: step_view(self.ops()))

    @property
    def meta(self) -> JobMeta:
        """Job meta: meta.yaml, else the meta embedded in trace.parquet, else (an unannotated
        import) the layout of its op table (stragglerlab.trace.step_view.layout_of)."""
        if not self.has_meta and not self.has_trace and self.is_general_import:
            from stragglerlab.trace.step_view import layout_of

            return self._cached("meta", lambda: layout_of(self.ops()))
        if self.has_meta or not self.has_trace:
            return self._cached("meta", lambda: read_meta(self.meta_path))
        return self._trace_and_meta()[1]

    def _meta_if_known(self) -> JobMeta | None:
        """meta.yaml when present: ranks in run.json, faults and findings are checked against it.

        (Not the trace's embedded meta: a small file never costs reading the trace.)
        """
        return self.meta if self.has_meta else None

    @property
    def record(self) -> RunRecord:
        """run.json, typed (error.rank checked against the job's size)."""
        return self._cached("record", lambda: read_run_record(self.record_path,
                                                              self._meta_if_known()))

    @property
    def faults(self) -> list[FaultRecord]:
        """faults.json, typed (targets checked against the job's layout)."""
        return self._cached("faults", lambda: read_faults(self.faults_path,
                                                          self._meta_if_known()))

    def _whatif_checked(self) -> tuple[dict, WhatIfRecord | None]:
        return self._cached("whatif", lambda: read_whatif(self.whatif_path, self._meta_if_known()))

    @property
    def whatif(self) -> dict:
        """whatif/whatif.json, validated (see read_whatif)."""
        return self._whatif_checked()[0]

    def whatif_record(self) -> WhatIfRecord:
        """whatif/whatif.json as the typed record of stragglerlab.run.results (the one its
        check built; a file of the layout before schema versions has none: refused)."""
        doc, record = self._whatif_checked()
        return record or WhatIfRecord.from_json(doc, str(self.whatif_path))

    def findings_document(self, detector: str, online: bool = False) -> FindingsDocument:
        """The detector's findings file, validated (it must be that detector's)."""
        return self._cached(f"findings:{detector}:{online}", lambda: read_findings(
            self.findings_path(detector, online), detector, self._meta_if_known(), online))

    def findings(self, detector: str, online: bool = False) -> list[Finding]:
        """The findings the detector wrote for this run."""
        return self.findings_document(detector, online).findings

    def status(self, seen: dict | None = None) -> dict[int, dict]:
        """Live per-rank progress {rank: {step, ...}}, read afresh; mid-write files skipped.
        `seen`: a dict the caller keeps between looks (a monitor at 1,024 ranks reads every
        file per look otherwise): a file whose inode, size and mtime are those of its last
        read is not read again (`write_status` rewrites a file in place: a later mtime; a
        file replaced by another writer: a new inode), if that read came `STATUS_SETTLED_NS` after
        its mtime (a file system's coarse mtime could give a rewrite within the same tick
        the same key)."""
        out: dict[int, dict] = {}
        folder = self.path / STATUS_DIR
        try:
            names = sorted(n for n in os.listdir(folder) if fnmatch.fnmatchcase(n, "rank*.json"))
        except OSError:  # no status/ (yet, or any more)
            names = []
        for name in names:
            p = folder / name
            try:
                st = p.stat()
            except OSError:
                st = None
            if st is None or not stat.S_ISREG(st.st_mode):
                # a pipe would block the read (the trainer writes files)
                _not_something_else(p, "the trainer's rank<N>.json")
                continue
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            if seen is not None and name in seen and seen[name][0] == key:
                out[int(p.stem[4:])] = seen[name][1]
                continue
            try:
                raw = json.loads(p.read_text())
            except (OSError, ValueError, RecursionError):
                continue  # a status file caught mid-write says nothing
            if not isinstance(raw, dict) or not p.stem[4:].isdigit():
                # Whole JSON of another shape is no torn write: a corrupt or foreign file.
                raise InputError(f"a rank status file holds {type(raw).__name__}, not the "
                                 "{step, ...} object the trainer writes (or its name is not "
                                 "rank<N>.json); delete it or rerun the training", str(p))
            if seen is not None and time.time_ns() - st.st_mtime_ns > STATUS_SETTLED_NS:
                seen[name] = (key, raw)
            elif seen is not None:
                seen.pop(name, None)
            out[int(p.stem[4:])] = raw
        return out

    def last_step_by_rank(self, seen: dict | None = None) -> dict[int, int]:
        """Last step each rank finished, from status/ (tells a hung or dead rank); `seen`:
        as for `status`."""
        out = {}
        for rank, s in self.status(seen).items():
            step = s.get("step", -1)
            if not isinstance(step, int) or isinstance(step, bool) or step < -1:
                raise InputError(f"step {str(step)[:40]!r} is not a step number (an integer "
                                 ">= -1); delete the file or rerun the training",
                                 str(self.status_path(rank)))
            out[rank] = step
        return out

    # -- writers ----------------------------------------------------------------------
    def write_meta(self, meta: JobMeta) -> None:
        """Write meta.yaml."""
        write_meta(self.meta_path, meta)
        self._cache.pop("meta", None)

    def write_faults(self, records: list[FaultRecord | dict]) -> None:
        """Write faults.json."""
        write_faults(self.faults_path, records)
        self._cache.pop("faults", None)

    def write_record(self, record: RunRecord) -> dict:
        """Write run.json; returns the document written."""
        self._cache.pop("record", None)
        return write_run_record(self.record_path, record)

    def write_whatif(self, doc: dict) -> None:
        """Write whatif/whatif.json."""
        write_whatif(self.whatif_path, doc)
        self._cache.pop("whatif", None)
        self._cache.pop("whatif_record", None)

    def write_findings(self, doc: FindingsDocument) -> Path:
        """Write detect/<detector>[-online].json; returns its path."""
        path = self.findings_path(doc.detector, doc.online)
        write_findings(path, doc)
        self._cache.pop(f"findings:{doc.detector}:{doc.online}", None)
        return path
