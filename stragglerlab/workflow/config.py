"""Validation of the Snakemake workflow's config, done once when the Snakefile is parsed.

The Snakefile loads config/workflow.yaml (plus any `--configfile` overrides,
e.g. config/smoke.yaml), checks it against the JSON Schema `SCHEMA`
(config/workflow.schema.yaml) with snakemake's `validate()` (a schema error
becomes one line through `schema_error_message`), then calls
`load_workflow_config(config, detectors)` for the semantic checks, before any
rule runs. Every problem is one InputError naming the key and the fix; the
Snakefile prints it and stops. Keys (all optional except where noted):

    results: results                 # output root (relative to the working directory)
    reference_traces: tests/data/reference-traces  # artifact traces for the figures; null = none
    detectors: [whatif, rank-score]  # detectors to run and score (must be registered)
    online: true                     # also run every detector online (<name>-online.json)
    fixed: {...}                     # paper jobs (see stragglerlab/workflow/population.py)
    population: {...}                # sampled jobs (see stragglerlab/workflow/population.py)
    splits: {...}                    # dev/test cases (see stragglerlab/workflow/splits.py)
    ray_address: HOST:PORT           # train on that Ray cluster (`train --ray-address`); null =
                                     # a private Ray per run

    wf = load_workflow_config(config, known_detectors=["whatif"])
    wf.runs, wf.population.scenario_yaml("clean-dp2-pp2")
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from stragglerlab.util.errors import InputError
from stragglerlab.workflow.population import Population, Run, expand_population
from stragglerlab.workflow.splits import expand_splits

KEYS = ("results", "reference_traces", "detectors", "online", "fixed", "population", "splits",
        "ray_address", "detector_settings")
"""Top-level keys of the workflow config."""

SCHEMA = Path(str(importlib.resources.files("stragglerlab") / "config" / "workflow.schema.yaml"))
"""JSON Schema of the workflow config (snakemake `validate(config, SCHEMA)`)."""


def schema_error_message(error: object) -> str:
    """One line for a jsonschema ValidationError: the schema's description of the failing
    key (written as the message to show) and the bad value, else jsonschema's own message."""
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}"
                   for p in getattr(error, "absolute_path", ())).lstrip(".")
    schema = getattr(error, "schema", None)
    description = schema.get("description") if isinstance(schema, dict) else None
    if description and getattr(error, "validator", None) != "additionalProperties":
        value = repr(getattr(error, "instance", None))
        message = f"{description}, got {value if len(value) <= 60 else value[:57] + '...'}"
    else:
        message = str(getattr(error, "message", error))
    where = f" (at {path})" if path else ""
    return f"{message}{where}; see {SCHEMA.name}"


@dataclass(frozen=True)
class WorkflowConfig:
    """The validated workflow config."""

    results: str
    """Output root folder, relative to the working directory."""
    reference_traces: str | None
    """Folder of the artifact's reference traces passed to `figures --reference`; None = none."""
    detectors: tuple[str, ...]
    """Detectors run on every run and scored."""
    online: bool
    """Also run each detector online (writes detect/<name>-online.json)."""
    population: Population
    """Every run and its scenario entry."""
    ray_address: str | None = None
    """Ray cluster the train rule attaches to (`train --ray-address`); None: a private Ray."""
    detector_settings: dict[str, dict[str, str]] = field(default_factory=dict)
    """Detector -> {config field: value}, passed to `detect` as `--set NAME=VALUE`."""

    def set_flags(self, detector: str) -> list[str]:
        """The detect rule's `--set` flags of one detector."""
        return [f"--set={k}={v}" for k, v in sorted(self.detector_settings.get(detector,
                                                                              {}).items())]

    @property
    def runs(self) -> tuple[Run, ...]:
        """Every training run."""
        return self.population.runs


def load_workflow_config(raw: object, known_detectors: Iterable[str],
                         where: str = "workflow config") -> WorkflowConfig:
    """Check the merged config mapping; InputError ('<where>: ...') on the first problem."""
    try:
        return _load(raw, list(known_detectors))
    except InputError as e:
        raise InputError(str(e), where) from None


def _load(raw: object, known: list[str]) -> WorkflowConfig:
    if not isinstance(raw, dict):
        raise InputError("the config must be a mapping of " + ", ".join(KEYS))
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise InputError(f"unknown key(s) {', '.join(map(str, unknown))}; known: "
                         f"{', '.join(KEYS)}")
    results = raw.get("results", "results")
    if not isinstance(results, str) or not results.strip() or results.strip() in {".", "/"}:
        raise InputError(f"results must name an output folder (not '.' or '/'), got {results!r}")
    reference = raw.get("reference_traces")
    if reference is not None and (not isinstance(reference, str) or not reference):
        raise InputError(f"reference_traces must be a folder path or null, got {reference!r}")
    detectors = raw.get("detectors", list(known))
    if not isinstance(detectors, list) or not detectors or \
            not all(isinstance(d, str) for d in detectors):
        raise InputError(f"detectors must be a non-empty list of names, got {detectors!r}")
    missing = [d for d in detectors if d not in known]
    if missing:
        raise InputError(f"unknown detector(s) {', '.join(missing)}; available: "
                         f"{', '.join(known) or 'none'} (`stragglerlab list detectors`)")
    if len(set(detectors)) != len(detectors):
        raise InputError(f"detectors {detectors} name a detector twice")
    online = raw.get("online", True)
    if not isinstance(online, bool):
        raise InputError(f"online must be true or false, got {online!r}")
    ray_address = raw.get("ray_address")
    if ray_address is not None and (not isinstance(ray_address, str) or not ray_address.strip()):
        raise InputError(f"ray_address must be a Ray address (HOST:PORT) or null, "
                         f"got {ray_address!r}")
    settings = _detector_settings(raw.get("detector_settings"), detectors)
    population = expand_population(raw.get("fixed"), raw.get("population"),
                                   extra=expand_splits(raw.get("splits")))
    return WorkflowConfig(results.strip().rstrip("/"), reference, tuple(detectors), online,
                          population, ray_address=ray_address, detector_settings=settings)


def _detector_settings(raw: object, detectors: list[str]) -> dict[str, dict[str, str]]:
    """detector_settings: {detector: {field: value}}, each checked against the detector's
    config now (a typo stops the workflow before any rule runs)."""
    from stragglerlab.analysis.detectors.registry import get_detector

    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise InputError("detector_settings must map a detector to {field: value}, got "
                         f"{raw!r}"[:200])
    out = {}
    for name, fields in raw.items():
        if name not in detectors:
            raise InputError(f"detector_settings names {name!r}, which is not in detectors "
                             f"({', '.join(detectors)})")
        out[name] = {str(k): str(v).lower() if isinstance(v, bool) else str(v)
                     for k, v in fields.items()}
        get_detector(name, out[name])  # parses every value: one clear error if bad
    return out
