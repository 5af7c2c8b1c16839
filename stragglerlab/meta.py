"""Job metadata: the parallel layout of a traced job, stored as YAML beside the trace.

The artifact's `meta-*.yaml` files load unchanged:

    from stragglerlab.meta import JobMeta
    meta = JobMeta.load("meta.yaml")
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import yaml

from stragglerlab.errors import InputError


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
        """Raise InputError when sizes are not positive or world_size is inconsistent."""
        for f in ("dp_size", "pp_size", "tp_size", "dsp_size", "vpp_size"):
            if getattr(self, f) < 1:
                raise InputError(f"{f} must be >= 1, got {getattr(self, f)}", path)
        if self.world_size != self.expected_world_size:
            raise InputError(
                f"world_size {self.world_size} != dp_size*pp_size*tp_size*dsp_size = "
                f"{self.dp_size}*{self.pp_size}*{self.tp_size}*{self.dsp_size} = "
                f"{self.expected_world_size}; fix the sizes or world_size",
                path,
            )
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
            raise InputError("job meta must be a mapping of dp_size, pp_size, ...", path)
        if "dp_size" not in raw or "pp_size" not in raw:
            raise InputError("job meta needs at least dp_size and pp_size", path)
        kwargs: dict = {}
        for f in dataclasses.fields(cls):
            if f.name not in raw or raw[f.name] is None:
                continue
            value = raw[f.name]
            if f.name == "trial_name":
                kwargs[f.name] = str(value)
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"{f.name} must be an integer, got {value!r}", path)
            kwargs[f.name] = value
        return cls(**kwargs).check(path)

    @classmethod
    def load(cls, path: str | Path) -> JobMeta:
        """Read a YAML meta file (the artifact's format)."""
        p = str(path)
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise InputError(f"cannot read job meta: {e.strerror}", p) from None
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise InputError(f"not valid YAML: {e}", p) from None
        return cls.from_dict(raw, p)

    def dump(self, path: str | Path) -> None:
        """Write as YAML (atomically)."""
        from stragglerlab.atomic import atomic_write_text

        atomic_write_text(path, yaml.safe_dump(self.to_dict(), sort_keys=False))
