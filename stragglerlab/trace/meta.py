"""Job metadata: the parallel layout of a traced job, stored as YAML beside the trace.

The artifact's `meta-*.yaml` files load unchanged:

    from stragglerlab.trace.meta import JobMeta
    meta = JobMeta.load("meta.yaml")
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from pathlib import Path

import yaml

from stragglerlab.util.errors import InputError
from stragglerlab.util.filecheck import echo


class LayoutFamily(str, enum.Enum):
    """Layout family of a job: the leaderboard's columns and the splits' coverage table."""

    PURE_DP = "pure-dp"
    PURE_PP = "pure-pp"
    DP_PP = "dp+pp"

    @classmethod
    def of(cls, dp: int, pp: int) -> LayoutFamily:
        """The family of a dp x pp layout (dp1-pp1 counts as pure DP)."""
        return cls.PURE_DP if pp == 1 else cls.PURE_PP if dp == 1 else cls.DP_PP

MAX_WORKERS = 65_536
"""Largest dp_size * pp_size (traced workers) a job meta may name: the analysis holds
per-worker arrays, and 65,536 workers is far past any trace it is benchmarked on."""
MAX_DEGREE = 65_536
"""Largest tp_size, dsp_size (and world_size / (dp*pp)) accepted."""
MAX_VPP = 64
"""Largest vpp_size (model chunks per stage)."""
MAX_TRIAL_NAME = 200
"""Longest trial_name, characters (it titles figures and timelines)."""
MAX_META_BYTES = 64 * 1024
"""Largest job meta YAML read (the artifact's are ~150 bytes)."""
META_FIX = "fix the job meta YAML (dp_size, pp_size, ...; see the artifact's meta-*.yaml)"


@dataclass(frozen=True)
class JobMeta:
    """Parallel layout of one job."""

    dp_size: int
    """Data-parallel degree."""
    pp_size: int
    """Pipeline-parallel degree (number of stages)."""
    tp_size: int = 1
    """Tensor-parallel degree (one traced worker per TP group)."""
    dsp_size: int = 1
    """Context / sequence-parallel degree."""
    vpp_size: int = 1
    """Virtual pipeline stages (model chunks) per stage."""
    world_size: int = 0
    """dp * pp * tp * dsp; 0 on construction means 'compute it'."""
    trial_name: str = ""
    """Name of the job or scenario."""
    run_id: int = 0
    """Run number within the trial."""

    def __post_init__(self) -> None:
        if self.world_size == 0:
            object.__setattr__(self, "world_size", self.expected_world_size)

    @property
    def expected_world_size(self) -> int:
        """dp * pp * tp * dsp."""
        return self.dp_size * self.pp_size * self.tp_size * self.dsp_size

    def check(self, path: str | None = None) -> JobMeta:
        """Raise InputError when sizes are not positive, too large or world_size is inconsistent."""
        for f in ("dp_size", "pp_size", "tp_size", "dsp_size", "vpp_size"):
            if getattr(self, f) < 1:
                raise InputError(f"{f} must be >= 1, got {getattr(self, f)}; {META_FIX}", path)
        for f, cap in (("tp_size", MAX_DEGREE), ("dsp_size", MAX_DEGREE), ("vpp_size", MAX_VPP),
                       ("dp_size", MAX_WORKERS), ("pp_size", MAX_WORKERS)):
            if getattr(self, f) > cap:
                raise InputError(f"{f} {getattr(self, f)} is over the limit of {cap:,}; "
                                 f"{META_FIX}", path)
        if self.dp_size * self.pp_size > MAX_WORKERS:
            raise InputError(f"dp_size*pp_size = {self.dp_size}*{self.pp_size} = "
                             f"{self.dp_size * self.pp_size:,} traced workers is over the limit "
                             f"of {MAX_WORKERS:,}; {META_FIX}", path)
        if self.world_size != self.expected_world_size:
            raise InputError(
                f"world_size {self.world_size} != dp_size*pp_size*tp_size*dsp_size = "
                f"{self.dp_size}*{self.pp_size}*{self.tp_size}*{self.dsp_size} = "
                f"{self.expected_world_size}; fix the sizes or world_size",
                path,
            )
        if len(self.trial_name) > MAX_TRIAL_NAME or not self.trial_name.isprintable():
            raise InputError(f"trial_name {self.trial_name[:40]!r}... must be printable text of "
                             f"at most {MAX_TRIAL_NAME} characters; {META_FIX}", path)
        if self.run_id < 0 or self.run_id > 2**53:
            raise InputError(f"run_id {self.run_id} must be in [0, 2**53]; {META_FIX}", path)
        return self

    def to_dict(self) -> dict:
        """Fields in the artifact's key order."""
        return {
            "trial_name": self.trial_name,
            "run_id": self.run_id,
            "dp_size": self.dp_size,
            "pp_size": self.pp_size,
            "tp_size": self.tp_size,
            "dsp_size": self.dsp_size,
            "vpp_size": self.vpp_size,
            "world_size": self.world_size,
        }

    @classmethod
    def from_dict(cls, raw: object, path: str | None = None) -> JobMeta:
        """Build and check from a mapping; unknown keys are ignored, bad types rejected."""
        if not isinstance(raw, dict):
            raise InputError(f"job meta must be a mapping of dp_size, pp_size, ..., got "
                             f"{echo(raw)}; {META_FIX}", path)
        if raw.get("dp_size") is None or raw.get("pp_size") is None:
            raise InputError(f"job meta needs at least dp_size and pp_size; {META_FIX}", path)
        kwargs: dict = {}
        for f in dataclasses.fields(cls):
            if f.name not in raw or raw[f.name] is None:
                continue
            value = raw[f.name]
            if f.name == "trial_name":
                if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                    raise InputError(f"trial_name must be text, got {echo(value)}; {META_FIX}",
                                     path)
                kwargs[f.name] = str(value)
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"{f.name} must be an integer, got {echo(value)}; {META_FIX}",
                                 path)
            kwargs[f.name] = value
        return cls(**kwargs).check(path)

    @classmethod
    def load(cls, path: str | Path) -> JobMeta:
        """Read a YAML meta file (the artifact's format): size-capped, UTF-8, no aliases."""
        from stragglerlab.util.filecheck import load_yaml

        raw = load_yaml(path, "job meta", META_FIX, max_bytes=MAX_META_BYTES)
        return cls.from_dict(raw, str(path))

    def dump(self, path: str | Path) -> None:
        """Write as YAML (atomically)."""
        from stragglerlab.util.atomic import atomic_write_text

        atomic_write_text(path, yaml.safe_dump(self.to_dict(), sort_keys=False))
