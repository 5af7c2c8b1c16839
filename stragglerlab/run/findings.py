"""Detector findings: the root-cause vocabulary, one finding, and the findings file.

A findings file is what `stragglerlab detect` writes (in the workflow:
`<run>/detect/<detector>.json`, `<run>/detect/<detector>-online.json`):

    {"schema": "stragglerlab.findings/1", "detector": "whatif", "run": "results/x/0",
     "online": false, "findings": [Finding.to_dict(), ...]}

One vocabulary: a root cause is spelled like the fault kind that causes it
(`RootCause` values = `FaultKind` values + `none`, and the two job-wide causes a
change every rank shares is seen as: `job-wide-comm`, `job-wide-compute`), so ground
truth and findings compare directly. Findings written with the old labels (`worker`,
`gc`, `network`, `sequence-imbalance`) still load (`LEGACY_SPELLINGS`).
A trace cannot tell a rate-limited link from a delayed one when messages have
fixed sizes, nor a hung rank from a dead one (its trace just stops), so a
slow link is reported as `net-throttle`, and `same_cause` (the scorer's rule)
counts `net-throttle` ~ `net-delay` and `hang` ~ `crash` as one cause.

    doc = read_findings(path, detector="whatif", meta=meta)   # InputError on a bad file
    write_findings(path, FindingsDocument(detector="whatif", run=str(run_dir),
                                          online=False, findings=findings))

Readers below `analysis` (the scorer's CLI, figures) parse findings through here;
`stragglerlab.analysis.detectors` re-exports Finding, RankRef and RootCause.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from pathlib import Path

from stragglerlab.scenarios.faults import FaultKind, Target
from stragglerlab.trace.meta import JobMeta
from stragglerlab.util.atomic import atomic_write_text
from stragglerlab.util.filecheck import Checker, echo, finite_or_none, load_json

FINDINGS_SCHEMA = "stragglerlab.findings/1"
"""Schema version written into every findings file (files without one are read as /1)."""
FINDINGS_FIX = "rerun `stragglerlab detect` to rewrite it"
"""The fix a bad findings file message suggests."""


class RootCause(str, enum.Enum):
    """The closed set of root-cause labels: the fault kinds' spellings, plus `none`."""

    SLOW_WORKER = FaultKind.SLOW_WORKER.value
    NET_THROTTLE = FaultKind.NET_THROTTLE.value
    NET_DELAY = FaultKind.NET_DELAY.value
    GC_PAUSES = FaultKind.GC_PAUSES.value
    STAGE_IMBALANCE = FaultKind.STAGE_IMBALANCE.value
    SEQ_IMBALANCE = FaultKind.SEQ_IMBALANCE.value
    HANG = FaultKind.HANG.value
    CRASH = FaultKind.CRASH.value
    NONE = "none"
    # Seen, not injected: a change of regime the whole job shares (a shared link or switch,
    # a job-wide slowdown), named by what changed over time, not by a rank (issue 60). A
    # fault record says when it may be seen as one (`observable_as`, the ground truth).
    JOB_WIDE_COMM = "job-wide-comm"
    JOB_WIDE_COMPUTE = "job-wide-compute"
    # Deprecated member names of the old vocabulary, kept so existing detector
    # plug-ins keep working; they are aliases (the same members, same values).
    WORKER = FaultKind.SLOW_WORKER.value
    GC = FaultKind.GC_PAUSES.value
    NETWORK = FaultKind.NET_THROTTLE.value
    SEQUENCE_IMBALANCE = FaultKind.SEQ_IMBALANCE.value

    @classmethod
    def _missing_(cls, value: object) -> RootCause | None:
        legacy = LEGACY_SPELLINGS.get(value) if isinstance(value, str) else None
        return cls(legacy) if legacy else None

    @classmethod
    def of_kind(cls, kind: str | FaultKind) -> RootCause:
        """The cause a detector should report for an injected fault kind (the same spelling)."""
        return cls(getattr(kind, "value", kind))


LEGACY_SPELLINGS: dict[str, str] = {
    "worker": RootCause.SLOW_WORKER.value,
    "gc": RootCause.GC_PAUSES.value,
    "network": RootCause.NET_THROTTLE.value,
    "sequence-imbalance": RootCause.SEQ_IMBALANCE.value,
}
"""Old root-cause labels -> the one vocabulary (accepted on read only)."""

INDISTINGUISHABLE: tuple[frozenset[RootCause], ...] = (
    frozenset({RootCause.NET_THROTTLE, RootCause.NET_DELAY}),
    frozenset({RootCause.HANG, RootCause.CRASH}),
)
"""Causes a trace does not tell apart (a slow link; a rank whose trace stops): scoring
counts a prediction within a group as right."""

JOB_WIDE: frozenset[RootCause] = frozenset({RootCause.JOB_WIDE_COMM,
                                           RootCause.JOB_WIDE_COMPUTE})
"""Causes that name a change every rank shares, not a fault kind: no fault is injected as
one, a fault is seen as one where every member of its group waits on it."""

if {c.value for c in RootCause} != ({k.value for k in FaultKind} | {RootCause.NONE.value}
                                    | {c.value for c in JOB_WIDE}):
    raise RuntimeError("RootCause must spell exactly the FaultKind values plus 'none' and the "
                       "job-wide causes")


def same_cause(truth: RootCause | str, predicted: RootCause | str) -> bool:
    """True when predicted names truth's cause (or one no trace tells apart from it)."""
    t, p = RootCause(truth), RootCause(predicted)
    return t is p or any(t in g and p in g for g in INDISTINGUISHABLE)


RankRef = Target
"""One traced worker a finding names: the same {rank, dp_rank, stage} record as a fault's target."""


@dataclass
class Finding:
    """One straggler a detector reports."""

    ranks: list[RankRef]
    """Workers blamed; empty = the whole job (e.g. sequence imbalance)."""
    first_step: int
    """First step the straggling is seen in (inclusive)."""
    last_step: int
    """Last step it is seen in (inclusive)."""
    root_cause: RootCause
    """Why, as one of the closed labels."""
    confidence: float
    """0..1, how sure the detector is."""
    estimated_slowdown: float | None = None
    """Job slowdown (ratio >= 1) the detector attributes to this finding, if it estimates one."""
    detected_at_step: int | None = None
    """Online mode: the step after which the finding was first reported."""
    detail: dict = field(default_factory=dict)
    """Detector-specific evidence (scores, thresholds), JSON-serializable."""

    def to_dict(self) -> dict:
        """JSON form (the `findings` entries of `stragglerlab detect`); NaN is written as null."""
        return {
            "ranks": [r.to_dict() for r in self.ranks],
            "first_step": int(self.first_step),
            "last_step": int(self.last_step),
            "root_cause": RootCause(self.root_cause).value,
            "confidence": float(self.confidence),
            "estimated_slowdown": finite_or_none(None if self.estimated_slowdown is None
                                                 else float(self.estimated_slowdown)),
            "detected_at_step": (None if self.detected_at_step is None
                                 else int(self.detected_at_step)),
            "detail": finite_or_none(self.detail),
        }

    @classmethod
    def from_dict(cls, raw: object, chk: Checker | None = None, where: str = "finding",
                  meta: JobMeta | None = None) -> Finding:
        """Inverse of to_dict, validated (ranks inside meta's layout when given)."""
        chk = chk or Checker("findings", FINDINGS_FIX)
        raw = chk.mapping(raw, where)
        ranks = chk.listing(raw.get("ranks", []), f"{where}.ranks")
        first = chk.integer(raw.get("first_step"), f"{where}.first_step", minimum=0)
        last = chk.integer(raw.get("last_step"), f"{where}.last_step", minimum=0)
        if last < first:
            chk.fail(f"{where}.last_step", f"{last} < first_step {first}")
        label = chk.string(raw.get("root_cause"), f"{where}.root_cause")
        try:
            cause = RootCause(label)
        except ValueError:
            chk.fail(f"{where}.root_cause", f"{echo(label)} is not one of "
                                            f"{', '.join(c.value for c in RootCause)}")
        detail = raw.get("detail")
        detail = chk.mapping({} if detail is None else detail, f"{where}.detail")
        chk.finite_tree(detail, f"{where}.detail")
        return cls(
            ranks=[RankRef.from_dict(r, chk, f"{where}.ranks[{i}]", meta)
                   for i, r in enumerate(ranks)],
            first_step=first, last_step=last, root_cause=cause,
            confidence=chk.number(raw.get("confidence"), f"{where}.confidence", 0.0, 1.0),
            estimated_slowdown=chk.number(raw.get("estimated_slowdown"),
                                          f"{where}.estimated_slowdown", 0.0, optional=True),
            detected_at_step=chk.integer(raw.get("detected_at_step"),
                                         f"{where}.detected_at_step", 0, optional=True),
            detail=detail,
        )


@dataclass(kw_only=True)
class FindingsDocument:
    """One findings file: what one detector found in one run."""

    detector: str
    """Registry name of the detector that wrote it."""
    run: str = ""
    """The run folder analysed."""
    online: bool = False
    """True for a step-by-step replay (findings carry detected_at_step)."""
    findings: list[Finding] = field(default_factory=list)
    """What it found ([] for a clean verdict)."""
    noise_floor: dict | None = None
    """The run's noise floor as the detector read it (whatif: family, clean S, thresholds
    raised, findings under the floor, which are reported here and not counted)."""
    schema: str = FINDINGS_SCHEMA
    """Schema version of the file."""

    def to_json(self) -> dict:
        """The file's JSON document."""
        out = {"schema": self.schema, "detector": self.detector, "run": self.run,
               "online": self.online, "findings": [f.to_dict() for f in self.findings]}
        if self.noise_floor is not None:
            out["noise_floor"] = finite_or_none(self.noise_floor)
        return out

    @classmethod
    def from_json(cls, raw: object, chk: Checker, meta: JobMeta | None = None) -> FindingsDocument:
        """Validate a parsed findings file (a file without `schema` is an older /1 file)."""
        raw = chk.mapping(raw, "findings file")
        schema = chk.schema(raw.get("schema", FINDINGS_SCHEMA), FINDINGS_SCHEMA, "findings")
        findings = chk.listing(raw.get("findings"), "findings")
        return cls(detector=chk.string(raw.get("detector"), "detector"),
                   run=chk.string(raw.get("run", ""), "run"),
                   online=chk.boolean(raw.get("online", False), "online"),
                   findings=[Finding.from_dict(f, chk, f"findings[{i}]", meta)
                             for i, f in enumerate(findings)],
                   noise_floor=(None if raw.get("noise_floor") is None
                                else chk.mapping(raw["noise_floor"], "noise_floor")),
                   schema=schema)


def read_findings(path: str | Path, detector: str | None = None,
                  meta: JobMeta | None = None, online: bool | None = None) -> FindingsDocument:
    """Read and validate a findings file; with `detector`, it must be that detector's; with
    `online`, a replay's (True) or a whole run's (False)."""
    chk = Checker(path, FINDINGS_FIX)
    doc = FindingsDocument.from_json(load_json(path, "findings file", FINDINGS_FIX), chk, meta)
    if detector is not None and doc.detector != detector:
        chk.fail("detector", f"findings of {echo(doc.detector)}, expected {echo(detector)}")
    if online is not None and doc.online != online:
        chk.fail("online", f"is {str(doc.online).lower()}, but this file holds "
                 f"{'a replay' if online else 'a whole run'}'s findings (detect writes "
                 "<detector>.json offline, <detector>-online.json with --online)")
    return doc


def write_findings(path: str | Path, doc: FindingsDocument) -> None:
    """Write a findings file atomically (strict JSON: no NaN)."""
    atomic_write_text(path, json.dumps(finite_or_none(doc.to_json()), indent=2,
                                       allow_nan=False) + "\n")
