"""`stragglerlab train`: run one scenario as a real multi-rank training job on Ray.

    stragglerlab train --scenario clean-dp2-pp2 [--config FILE] [--steps N] --out DIR
    stragglerlab train --scenario clean-dp2-pp2 --ray-address HOST:6379 --placement spread --out DIR

Writes the run folder DIR (trace.parquet, meta.yaml, faults.json, run.json;
a failed or killed earlier run's outputs there are replaced, a finished one's
only with --overwrite), shows progress per step with
ETA on stderr and prints the outcome (`run ok: ...` or `run FAILED: ...`) to
stdout, with --quiet too. Exit 0 when the run succeeded, 1 when it failed
(run.json says which rank and why), 2 for bad input. With --allow-failed-run a
run that failed cleanly (run.json written, at least one complete step traced,
e.g. a `hang` or `crash` scenario) exits 0 too, so a workflow analyses it.
With --ray-address (or RAY_ADDRESS) the job runs on that Ray cluster
(workloads/cluster.py), which is left running; without, on a private local Ray.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from stragglerlab.cli.common import examples, out_folder
from stragglerlab.run.run_folder import KINETO_DIR
from stragglerlab.scenarios.scenario import load_scenario
from stragglerlab.scenarios.scenario_vocab import TORCH_WORKLOADS
from stragglerlab.util.errors import InputError


def add_parser(sub, name: str) -> argparse.ArgumentParser:
    """Register the verb's flags (the CLI root adds --quiet)."""
    p = sub.add_parser(name, help="run a scenario's training job on Ray, traced",
                       epilog=examples(
                           "stragglerlab train --scenario clean-dp2-pp2 --steps 12 "
                           "--out results/clean-dp2-pp2/0",
                           "stragglerlab train --scenario slow-worker-1 --ray-address "
                           "head:6379 --placement spread --out results/slow-worker-1/0"))
    p.add_argument("--scenario", required=True, metavar="NAME",
                   help="scenario name (`stragglerlab list scenarios`)")
    p.add_argument("--config", metavar="FILE", help="YAML merged over the built-in scenarios")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="run folder to write (required; trace.parquet, meta.yaml, "
                        "faults.json, run.json)")
    p.add_argument("--steps", type=int, metavar="N", help="override run.steps")
    p.add_argument("--seed", type=int, metavar="N", help="override run.seed")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="attach to this Ray cluster (default: $RAY_ADDRESS; unset: a private "
                        "local Ray); the cluster is never stopped")
    p.add_argument("--launcher", choices=["ray", "local"], default="ray",
                   help="ray (default): one Ray actor per rank; local: one plain process per "
                        "rank (torch.multiprocessing), the fallback where Ray is not "
                        "installed, e.g. a GPU machine with only its own torch; ranks share "
                        "the GPUs when there are fewer than ranks")
    p.add_argument("--placement", choices=["pack", "spread"],
                   help="override run.placement: pack ranks on few nodes (default) or spread "
                        "them over the cluster's nodes")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a finished run already in --out (its trace, and the what-if "
                        "and findings made from it); without it such a folder is refused")
    p.add_argument("--allow-failed-run", action="store_true",
                   help="exit 0 when the run failed cleanly and kept a trace (run.json says "
                        "failed); for workflows that analyse failed runs too")
    p.add_argument("--monitor", action="store_true",
                   help="run `stragglerlab monitor` on the run folder beside the job (page, "
                        "metrics, alerts; RUN/monitor/)")
    p.add_argument("--monitor-args", metavar="ARGS",
                   help="more flags for the monitor, e.g. \"--webhook URL --port 0\"")
    return p


def _load(args, flags: dict):
    """The scenario with the flags' overrides; a bad flag is blamed on the flag, not on
    the scenario file (which is fine without it)."""
    from stragglerlab.scenarios.scenario import scenario_table

    if args.config is None and args.scenario not in scenario_table(None)[1]:
        known = ", ".join(sorted(scenario_table(None)[1]))
        raise InputError(f"unknown scenario {args.scenario!r}: give a built-in one ({known}), "
                         "or your scenario file with --config FILE", "--scenario")
    try:
        return load_scenario(args.scenario, args.config, {"run": flags} if flags else None)
    except InputError as e:
        if not flags:
            raise
        load_scenario(args.scenario, args.config)  # the file's own error, if it has one
        given = " ".join(f"--{k} {v}" for k, v in flags.items())
        raise InputError(f"{str(e).split(': ', 1)[-1]}", given) from None


def run(args) -> int:
    """Load the scenario, launch, summarise."""
    if args.monitor_args is not None and not args.monitor:
        raise InputError(f"--monitor-args {args.monitor_args!r}: these are flags of the "
                         "monitor started beside the job by --monitor; add --monitor, or "
                         "leave --monitor-args out")
    check_train_extra(args.launcher)
    _not_a_finished_run(_not_another_job(out_folder(args.out)), args.overwrite)
    overrides: dict = {"run": {}}
    if args.steps is not None:
        overrides["run"]["steps"] = args.steps
    if args.seed is not None:
        overrides["run"]["seed"] = args.seed
    if args.placement is not None:
        overrides["run"]["placement"] = args.placement
    ray_address = args.ray_address or os.environ.get("RAY_ADDRESS") or None
    if args.launcher == "local" and args.ray_address:
        raise InputError("--ray-address attaches to a Ray cluster and --launcher local runs "
                         "without Ray: give one of them", "--launcher local")
    if args.launcher == "local":
        ray_address = None  # $RAY_ADDRESS is for the Ray launcher
    if ray_address:
        from stragglerlab.workloads.placement import check_ray_address

        ray_address = check_ray_address(ray_address, "--ray-address" if args.ray_address
                                        else "RAY_ADDRESS")
    scenario = _load(args, overrides["run"])
    # Every fault checked, the config file named, before anything starts (the launcher
    # checks them again, as the faults shape the scenario).
    from stragglerlab.injectors.registry import check_scenario_faults

    check_scenario_faults(scenario, args.config)
    _check_monitor(args, scenario)
    if ray_address:  # last of the checks: it waits on the network
        from stragglerlab.workloads.placement import check_ray_reachable

        check_ray_reachable(ray_address, "--ray-address" if args.ray_address else "RAY_ADDRESS")
    from stragglerlab.host.residue import clean_residue
    if args.launcher == "local":  # torch only: no Ray
        from stragglerlab.workloads.local_launcher import launch_local as launch
    else:
        from stragglerlab.workloads.launcher import launch  # torch and ray only for this verb

    clean_residue()  # what a killed run left (`stragglerlab clean`); launch repeats it

    from stragglerlab.cli.monitor import beside
    from stragglerlab.cli.progress import Reporter

    with Reporter(quiet=args.quiet) as progress:
        progress(f"scenario {scenario.name}: dp={scenario.parallel.dp} "
                 f"pp={scenario.parallel.pp}, {scenario.run.steps} steps -> {args.out}")
        if ray_address:
            progress(f"attaching to the Ray cluster at {ray_address}")
        from stragglerlab.analysis.fault_control import early_start_note

        note = early_start_note([int(f.get("first_step", 0)) for f in scenario.faults],
                                scenario.run.warmup_steps,
                                [f.get("last_step") for f in scenario.faults],
                                scenario.run.steps)
        if note:
            progress(note)
        # The launcher's `step 3/31  loss ...` messages move the bar; its others are lines.
        steps = progress.task("step", total=scenario.run.steps)
        with beside(args, scenario, progress):  # --monitor: `stragglerlab monitor` beside it
            more = {"ray_address": ray_address} if args.launcher == "ray" else {}
            record = launch(scenario, args.out, steps, keep_monitor=bool(args.monitor),
                            **more)  # started, writing monitor/
    traced = len(record["trace"]["complete_steps"])
    # The outcome is the result, ok or failed: stdout, --quiet or not (the exit code says which).
    if record["outcome"] == "ok" and scenario.workload in TORCH_WORKLOADS:
        # torch.profiler alone traces these: no trace.parquet, per-rank Kineto traces.
        print(f"run ok: Kineto traces of {scenario.world_size} ranks in "
              f"{Path(args.out) / KINETO_DIR} ({record['wall_s']['total']:.1f}s, backend "
              f"{record['backend']}); analyse with `stragglerlab import kineto --traces`")
        return 0
    if record["outcome"] == "ok":
        print(f"run ok: {traced} traced steps in {args.out} "
              f"({record['wall_s']['total']:.1f}s, backend {record['backend']})")
        return 0
    err = record["error"] or {}
    print(f"run FAILED: rank {err.get('rank')} {err.get('kind')}: {err.get('message')}; "
          f"{traced} complete steps kept in {args.out}")
    return 0 if args.allow_failed_run and failed_cleanly(args.out) else 1


def check_train_extra(launcher: str) -> None:
    """InputError when what the launcher needs is not installed (the core install has
    neither torch nor Ray): torch always, Ray for the Ray launcher."""
    import importlib.util

    needed = ("torch",) if launcher == "local" else ("torch", "ray")
    missing = [m for m in needed if importlib.util.find_spec(m) is None]
    if missing:
        hint = (" (where torch is installed without Ray, e.g. a GPU machine's own CUDA "
                "torch: --launcher local)" if missing == ["ray"] else "")
        raise InputError(f"train needs {' and '.join(needed)}; not installed: "
                         f"{', '.join(missing)}. Install the extra: pip install "
                         f"'stragglerlab[train]'{hint}", f"--launcher {launcher}")


def _check_monitor(args, scenario) -> None:
    """--monitor: the monitor's flags (the job's layout, then --monitor-args) checked as
    `stragglerlab monitor` checks them, so a flag it would refuse stops train before the
    job starts rather than leave the run unmonitored."""
    if not args.monitor:
        return
    from stragglerlab.cli.monitor import check_monitor_argv, monitor_argv

    check_monitor_argv(monitor_argv(Path(args.out), scenario, args.monitor_args))


def _train_wrote(out: Path) -> bool:
    """An earlier `train` into `out` (finished, failed or killed) left its records; a folder
    holding only the workflow's scenario.yaml is new."""
    return (any((out / n).exists() for n in ("run.json", "trace-parts", "status"))
            or not any((out / n).exists() for n in ("trace.parquet", "meta.yaml")))


def _not_another_job(out: Path) -> Path:
    """A rerun replaces its own earlier run there (and the what-if and findings made from
    it); an import's or synth's trace, or the artifact's, is another job's and refused."""
    from stragglerlab.cli.common import RUN_RECORDS, not_another_run

    foreign = ("ops.parquet", "import.json", "whatif.json", "result-artifact.json")
    return not_another_run(out, tuple(n for n in RUN_RECORDS if n not in foreign),
                           _train_wrote, "train")


def _not_a_finished_run(out: Path, overwrite: bool) -> None:
    """A rerun into a finished run's folder would replace its trace and delete the what-if
    and findings made from it: only on request. A failed or killed run is replaced freely
    (a retry), and so is a folder whose run.json the workflow removed before rerunning."""
    import json

    try:
        record = json.loads((out / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if overwrite or not isinstance(record, dict) or record.get("outcome") != "ok":
        return
    made = [n for n in ("whatif", "detect", "plot", "monitor") if (out / n).exists()]
    also = f" and its {', '.join(made)}/" if made else ""
    raise InputError(f"already holds a finished run (run.json: outcome ok){also}; pass "
                     "--overwrite to replace it, or write to another --out folder", str(out))


def failed_cleanly(out: str) -> bool:
    """run.json says `failed` and a trace of at least one complete step was kept."""
    from stragglerlab.run.run_folder import RunFolder

    folder = RunFolder(path=Path(out))
    try:
        record = folder.record
    except InputError:
        return False  # no readable run.json: not a clean failure
    return record.outcome == "failed" and folder.has_trace and bool(record.complete_steps)
