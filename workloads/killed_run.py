"""A run whose driver was killed: finish its folder as a failed run with its finished steps.

`train`'s driver writes the run folder (trace.parquet, meta.yaml, faults.json, run.json)
as the run ends, whatever ended it; a driver killed with SIGKILL writes nothing. The
ranks' trace parts hold every step they finished, so nothing is lost but the folder's
assembly. While the run goes, `driver.json` names the driver (host, process mark) and the
scenario as its faults shaped it; the driver removes it once the folder is written. A
`driver.json` whose driver is gone therefore means a killed driver, and the reading verbs
(`whatif`, `detect`, `score`) call `finish_killed_run` first: it writes the folder as
the driver would have, outcome `failed`, error kind `driver-killed`, with the steps every
rank finished. What the killed run left on the host (processes, cgroups, tc rules) is
`stragglerlab clean`'s.

Ground truth: the injectors are rebuilt from the scenario's faults (targets, steps,
requested parameters); what an injector measures at run time is recomputed from the trace
where it can be, else recorded as an error in its `measured` field. A cluster run's
per-node clock corrections are measured after the ranks start and are not in
driver.json: its ranks' timestamps are taken as written.

    write_driver_record(run_dir, scenario)      # the driver, as the run starts
    note = finish_killed_run(run_dir)           # a reader: None, or what it did
"""

from __future__ import annotations

import platform
import time
from pathlib import Path

from stragglerlab.host.residue import driver_alive, driver_mark
from stragglerlab.run.run_folder import DRIVER_JSON, RUN_JSON, TRACE_PARTS_DIR
from stragglerlab.scenarios.faults import parse_faults
from stragglerlab.scenarios.scenario import Scenario, scenario_to_dict
from stragglerlab.util.atomic import atomic_write_json
from stragglerlab.util.errors import InputError
from stragglerlab.util.filecheck import load_json
from stragglerlab.util.folder_lock import hold
from stragglerlab.util.typed_mapping import build_dataclass

KILLED_KIND = "driver-killed"
"""run.json `error.kind` of a run finished here."""
_FIX = "remove driver.json if the run folder is not a `stragglerlab train` run's"


def write_driver_record(run_dir: Path, scenario: Scenario) -> None:
    """driver.json: this driver (host, process mark, start time) and its scenario."""
    atomic_write_json(Path(run_dir) / DRIVER_JSON, {
        "host": platform.node(), "driver": driver_mark(), "started_unix_s": time.time(),
        "scenario": scenario_to_dict(scenario)})


def finish_killed_run(run_dir: str | Path) -> str | None:
    """Write the folder of a run whose driver was killed; None when there is none to write
    (no driver.json, or run.json already written). InputError when the driver still runs,
    ran on another host, or driver.json is damaged."""
    run_dir = Path(run_dir)
    path = run_dir / DRIVER_JSON
    if not path.is_file() or (run_dir / RUN_JSON).exists():
        return None
    raw = load_json(path, "the running driver's record (driver.json)", _FIX)
    if not isinstance(raw, dict) or not all(
            isinstance(raw.get(k), t) for k, t in (("host", str), ("driver", str),
                                                    ("started_unix_s", (int, float)),
                                                    ("scenario", dict))):
        raise InputError("expected an object with host, driver, started_unix_s and "
                         f"scenario; {_FIX}", str(path))
    if raw["host"] != platform.node():
        raise InputError(f"the run's driver ran on host {raw['host']!r} and left no "
                         "run.json: it may still run there; read the run there (where a "
                         "killed driver's folder is finished), or wait for it to end",
                         str(path))
    if driver_alive(raw["driver"]):
        pid = raw["driver"].partition(":")[0]
        raise InputError(f"the run is still going (driver pid {pid}): wait for it to end, "
                         "or watch it live with `stragglerlab monitor --run "
                         f"{run_dir}`", str(path))
    where = str(path)
    scenario = build_dataclass(Scenario, raw["scenario"], where, "driver.json scenario")
    scenario = scenario.check(where)
    from stragglerlab.injectors.registry import build_injectors
    from stragglerlab.workloads.run_folder import write_run_folder

    p = scenario.parallel
    injectors = build_injectors(parse_faults(scenario.faults, p.dp, p.pp,
                                             scenario.run.steps, where), where)
    died = _last_write(run_dir)
    record = {"scenario": raw["scenario"], "name": scenario.name, "seed": scenario.run.seed,
              "outcome": "failed", "host": raw["host"],
              "error": {"rank": None, "kind": KILLED_KIND, "message": (
                  f"the driver ({raw['driver'].partition(':')[0]} on {raw['host']}) died "
                  "before it wrote the run folder; the trace holds the steps every rank "
                  "finished")},
              "wall_s": {"total": max(0.0, died - float(raw["started_unix_s"]))},
              "faults_requested": len(injectors)}
    with hold(run_dir, "train (finishing a killed run)"):
        if (run_dir / RUN_JSON).exists():  # another reader finished it meanwhile
            return None
        written = write_run_folder(run_dir, scenario, record, injectors)
        path.unlink(missing_ok=True)
    steps = (written.get("trace") or {}).get("complete_steps") or []
    return (f"{run_dir}: its driver was killed; finished as a failed run "
            f"({KILLED_KIND}) with the {len(steps)} steps every rank finished")


def _last_write(run_dir: Path) -> float:
    """When the ranks last wrote a trace part (about when the run stopped)."""
    parts = sorted((run_dir / TRACE_PARTS_DIR).glob("rank*.bin")) \
        if (run_dir / TRACE_PARTS_DIR).is_dir() else []
    return max((p.stat().st_mtime for p in parts), default=time.time())
