# Shared helpers of the workflow: config validation, the run table, paths.
#
# Included first by the Snakefile. The config (config/workflow.yaml merged with
# any --configfile / --config overrides) is validated here, at parse time,
# before any rule runs: first against config/workflow.schema.yaml with
# snakemake's validate(), then by stragglerlab/workflow/config.py's semantic
# checks; a bad config stops the workflow with one message.
#
# Conventions of every rule: one `stragglerlab` verb per job (--run DIR for one
# run folder, --runs DIR... for several, --out always a folder with fixed file
# names), every path quoted in the shell command ({input:q}, {params.x:q}), and
# a log under results/logs/.

import re
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from stragglerlab.util.errors import InputError
from stragglerlab.workflow.config import SCHEMA, load_workflow_config, schema_error_message


def _known_detectors():
    """Registered detector names; analysis/ is imported only here (it pulls in pandas)."""
    from stragglerlab.analysis.detectors.registry import detector_names

    return detector_names()


_WHERE = "workflow config (config/workflow.yaml + overrides)"
try:
    validate(config, str(SCHEMA), set_default=False)
except WorkflowError as e:
    # validate() raises inside `except ValidationError`: print that error's one line,
    # not the schema dump.
    cause = e.__cause__ or e.__context__ or e
    sys.exit(f"stragglerlab workflow: config error: {_WHERE}: {schema_error_message(cause)}")
try:
    WF = load_workflow_config(config, _known_detectors(), where=_WHERE)
except InputError as e:
    # One clear message, no traceback: snakemake exits on SystemExit with this text.
    sys.exit(f"stragglerlab workflow: config error: {e}")

# The stragglerlab CLI of the interpreter running snakemake (no PATH or venv activation needed).
SL = f"{shlex.quote(sys.executable)} -m stragglerlab"
R = WF.results
RUNS = {(r.scenario, r.seed): r for r in WF.runs}


def _reference_traces():
    """The artifact's reference traces folder (relative to the repository), or None if absent."""
    if WF.reference_traces is None:
        return None
    path = Path(workflow.basedir) / WF.reference_traces
    if not path.is_dir():
        print(f"stragglerlab workflow: note: reference traces {path} not found; figures from "
              "the artifact's traces are skipped", file=sys.stderr)
        return None
    return str(path.resolve())


REFERENCE = _reference_traces()


def _reference_jobs():
    """The reference traces (AR, ST) present in REFERENCE: each gets a whatif_reference job."""
    if REFERENCE is None:
        return []
    from stragglerlab.figures.fig14_heatmaps import REFERENCE_JOBS

    return [j for j in REFERENCE_JOBS if (Path(REFERENCE) / f"trace-{j}.parquet").is_file()]


REFERENCE_JOBS = _reference_jobs()


def _reads_whatif(name):
    """Whether detector `name` reads the run's whatif.json offline (class attribute)."""
    from stragglerlab.analysis.detectors.registry import get_detector

    return bool(getattr(get_detector(name), "reads_whatif", False))


READS_WHATIF = {d for d in WF.detectors if _reads_whatif(d)}
"""Detectors whose offline job depends on the run's whatif/whatif.json."""
MODES = {"offline": "", "online": "-online"}
"""Detect modes and their {mode} wildcard value (the suffix of the CLI's fixed file name)."""


def run_dir(scenario, seed):
    """A run's folder below the results root."""
    return f"{R}/{scenario}/{seed}"


def run_dirs():
    """Every run folder, in the config's order."""
    return [run_dir(r.scenario, r.seed) for r in WF.runs]


def detect_modes():
    """The detect modes the config asks for: offline, and online when `online: true`."""
    return ["offline", "online"] if WF.online else ["offline"]


def detect_names():
    """Detector output names per run: <detector> and, with online, <detector>-online."""
    return [f"{d}{MODES[m]}" for d in WF.detectors for m in detect_modes()]


def detect_files():
    """Every findings file of every run."""
    return [f"{d}/detect/{n}.json" for d in run_dirs() for n in detect_names()]


def all_runs(pattern):
    """pattern (with {dir}) expanded over every run folder."""
    return [pattern.format(dir=d) for d in run_dirs()]


def scenario_entry(wildcards):
    """The scenario config text the train rule writes and passes as --config."""
    return WF.population.scenario_yaml(wildcards.scenario)


def _alternation(names):
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


wildcard_constraints:
    scenario=_alternation({r.scenario for r in WF.runs}),
    seed=r"\d+",
    detector=_alternation(WF.detectors),
    mode="|-online",
    job=_alternation(REFERENCE_JOBS) if REFERENCE_JOBS else "(?!)",
