# Shared helpers of the workflow: config validation, the run table, paths.
#
# Included first by the Snakefile. The config (config/workflow.yaml merged with
# any --configfile / --config overrides) is validated here, at parse time,
# before any rule runs: a bad config stops the workflow with one message.

import re
import shlex
import sys
from pathlib import Path

from stragglerlab.errors import InputError
from stragglerlab.workflow.config import load_workflow_config


def _known_detectors():
    """Registered detector names; analysis/ is imported only here (it pulls in pandas)."""
    from stragglerlab.analysis.detectors.registry import detector_names

    return detector_names()


try:
    WF = load_workflow_config(config, _known_detectors(),
                              where="workflow config (config/workflow.yaml + overrides)")
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


def run_dir(scenario, seed):
    """A run's folder below the results root."""
    return f"{R}/{scenario}/{seed}"


def run_dirs():
    """Every run folder, in the config's order."""
    return [run_dir(r.scenario, r.seed) for r in WF.runs]


def detect_names():
    """Detector output names per run: <detector> and, with online, <detector>-online."""
    return [f"{d}{suffix}" for d in WF.detectors for suffix in ("", "-online")[: 1 + WF.online]]


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
