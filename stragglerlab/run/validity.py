"""Whether a what-if result may be read as the job's: the reproduction gate.

The what-if's S compares two *simulated* step times. It says something about
the job only where the simulation, run with the traced durations, reproduces
the traced step (design.md section 4: the paper measured a median discrepancy
of 1.3 % and P90 5.5 % over its population, and dropped the jobs above 5 %).
So every result carries a `Validity`:

* `valid` is False when |discrepancy| > MAX_DISCREPANCY, or when the model's
  premise visibly fails on the trace (a launch-bound GPU job: its GPU
  segments are idle gaps the host sets, and idealizing them idealizes host
  time the model does not represent);
* an invalid result asserts no straggling verdict (`verdict` is None), keeps
  its numbers as the model's, and names what the model saw (`reasons`, each a
  `Reason`, with a human line in `detail`);
* `--force` (`forced`) shows the verdict anyway, marked as forced.

Caveats (evidence that did not invalidate the result, e.g. a step-entry skew
within the discrepancy limit) are listed in `detail` of a valid result too.

    v = judge(discrepancy=0.42, evidence=[Finding(Reason.LAUNCH_BOUND, "...", gates=True)])
    v.verdict(1.32)      # None: gated
    v.banner()           # one line for a summary, a picture or a page
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

MAX_DISCREPANCY = 0.05
"""|actual / simulated step time - 1| above which no verdict is asserted: the paper's cut
(Lin et al., OSDI'25: jobs whose simulation missed the trace by more than 5 % were dropped
from its study; its population's P90 was 5.5 %)."""
STRAGGLING_S = 1.1
"""S at or above which a job counts as straggling (the paper's threshold)."""


class Reason(str, Enum):
    """What the model saw that makes (or may make) its numbers not the job's."""

    DISCREPANCY = "discrepancy"
    """The simulation with the traced durations misses the traced step by > MAX_DISCREPANCY."""
    LAUNCH_BOUND = "launch-bound"
    """GPU kernels mostly start as their launches return; the segments are host time."""
    ENTRY_SKEW = "step-entry-skew"
    """Ranks enter the step far apart (the cause is in an untraced step before)."""
    UNMATCHED_GROUPS = "unmatched-groups"
    """Collectives matched across ranks were implausible and were treated as local."""
    LOCAL_OPS = "local-ops"
    """Many communication ops have no traced peer: their waits are taken as work."""
    RELEASED_GROUPS = "released-groups"
    """Ranks issued collectives in contradicting orders; groups were released early."""
    CLOCKS = "clock-hypothesis"
    """The clock alignment left groups whose members were not inside them together."""


@dataclass(kw_only=True)
class Finding:
    """One piece of evidence about the model's fit."""

    reason: Reason
    """What was seen."""
    detail: str
    """One line for a reader, with the numbers."""
    gates: bool = False
    """True: it invalidates the result by itself (the model's premise fails)."""


@dataclass(kw_only=True)
class Validity:
    """The gate's decision about one result."""

    valid: bool
    """True: the simulation reproduces the trace and its premise holds."""
    discrepancy: float
    """actual / simulated step time - 1 (both measured alike)."""
    limit: float = MAX_DISCREPANCY
    """The |discrepancy| limit applied."""
    reasons: list[str] = field(default_factory=list)
    """Reason values of an invalid result (empty when valid)."""
    detail: list[str] = field(default_factory=list)
    """Human lines: the reasons, then caveats that did not gate."""
    forced: bool = False
    """True: the verdict was asked for anyway (--force)."""

    def verdict(self, slowdown: float) -> bool | None:
        """S >= STRAGGLING_S where valid or forced; None (no verdict) where gated."""
        if not (self.valid or self.forced):
            return None
        return bool(slowdown >= STRAGGLING_S)

    def banner(self) -> str:
        """One line: '' for a valid result, else what to distrust and why."""
        if self.valid:
            return ""
        why = "; ".join(self.detail[: len(self.reasons)]) or ", ".join(self.reasons)
        head = ("FORCED: the what-if's model does not hold for this trace" if self.forced
                else "NO VERDICT: the what-if's model does not hold for this trace")
        return f"{head} ({', '.join(self.reasons)}): {why}"

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {"valid": self.valid, "discrepancy": self.discrepancy, "limit": self.limit,
                "reasons": list(self.reasons), "detail": list(self.detail),
                "forced": self.forced}

    @classmethod
    def from_dict(cls, d: dict) -> Validity:
        """The inverse of to_dict (the reader checks the types)."""
        return cls(valid=bool(d["valid"]), discrepancy=float(d["discrepancy"]),
                   limit=float(d.get("limit", MAX_DISCREPANCY)),
                   reasons=[str(r) for r in d.get("reasons", [])],
                   detail=[str(x) for x in d.get("detail", [])],
                   forced=bool(d.get("forced", False)))


def judge(discrepancy: float, evidence: list[Finding] | None = None, force: bool = False,
          limit: float = MAX_DISCREPANCY) -> Validity:
    """The gate (see the module doc): invalid when |discrepancy| > limit or a finding gates.
    The reasons of an invalid result are the discrepancy (when over) and every finding
    (they name what the model saw); a valid result lists its findings as caveats."""
    evidence = list(evidence or [])
    over = not abs(discrepancy) <= limit  # NaN is over
    valid = not over and not any(f.gates for f in evidence)
    reasons, detail = [], []
    if over:
        reasons.append(Reason.DISCREPANCY.value)
        detail.append(f"the simulation with the traced durations misses the traced step by "
                      f"{100 * discrepancy:+.1f}% (limit ±{100 * limit:.0f}%, the paper's cut)")
    ordered = sorted(evidence, key=lambda f: not f.gates)
    if not valid:
        for f in ordered:
            if f.reason.value not in reasons:
                reasons.append(f.reason.value)
                detail.append(f.detail)
    else:
        detail += [f"caveat: {f.detail}" for f in ordered]
    return Validity(valid=valid, discrepancy=float(discrepancy), limit=limit,
                    reasons=reasons, detail=detail, forced=bool(force and not valid))


def validity_of(doc: dict, discrepancy: float) -> Validity:
    """The Validity a whatif.json holds, or (files written before it was recorded) the one
    its discrepancy alone gives."""
    raw = doc.get("validity")
    if isinstance(raw, dict):
        return Validity.from_dict(raw)
    return judge(discrepancy)
