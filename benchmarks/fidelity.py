"""Fidelity suite: §6 at DP 4 x PP 4, clean runs, mitigation gains, with repeats.

Runs, each `--repeats` times (seed = repeat index; a slow run pairs with the
clean run of its seed):

* s6:          clean-dp4-pp4 and slow-worker-1..3 (16 workers, the paper's §6 job);
* clean:       clean-dp2-pp2 (clean-dp4-pp4 comes with s6);
* mitigations: gc-pauses / gc-planned, stage-imbalance / stage-rebalanced,
               seq-imbalance / seq-rebalanced;
* extras:      the 4-worker slow-worker-<n>-dp2-pp2 (only with `--groups ... extras`).

Every run is `stragglerlab train` then `stragglerlab whatif` into
OUT/<scenario>/<seed>/ (the Snakemake layout, so `stragglerlab figures --runs`
reads it too). Resumable: a run whose folder has run.json with outcome ok and
whatif/whatif.json is skipped, a trained run without its what-if gets only
the what-if, anything else is moved aside to OUT/.partial/ and run again; so
the suite can run in pieces (`--groups s6`, `--max-runs N`, Ctrl-C and rerun).
Prints progress with the time used and an estimate of the time left (per-run
times are learnt as runs finish, OUT/.durations.json), then the tables
(benchmarks/fidelity_tables.py): measured slowdown and what-if S with the
mean and the median ideal with their errors and spread; clean S and median
simulation discrepancy; mitigation gains beside the paper's; written to
OUT/fidelity.md and OUT/fidelity.json, and the §6 and mitigation tables as
figures in OUT/figures/.

    .venv/bin/python benchmarks/fidelity.py --out results-fidelity            # everything
    .venv/bin/python benchmarks/fidelity.py --out results-fidelity --plan     # runs + estimate
    .venv/bin/python benchmarks/fidelity.py --out results-fidelity --groups s6 --repeats 3
    .venv/bin/python benchmarks/fidelity.py --out results-fidelity --report   # tables only

Timing needs the machine to itself: run nothing else meanwhile (`uptime` is
recorded before and after every run, in OUT/<scenario>/<seed>/fidelity.json).
"""

from __future__ import annotations

import argparse
import enum
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fidelity_tables import build_report  # noqa: E402


class Group(str, enum.Enum):
    """Parts of the suite, runnable one at a time."""

    S6 = "s6"
    CLEAN = "clean"
    MITIGATIONS = "mitigations"
    EXTRAS = "extras"


GROUPS: dict[Group, tuple[str, ...]] = {
    Group.S6: ("clean-dp4-pp4", "slow-worker-1", "slow-worker-2", "slow-worker-3"),
    Group.CLEAN: ("clean-dp2-pp2",),
    Group.MITIGATIONS: ("gc-pauses", "gc-planned", "stage-imbalance", "stage-rebalanced",
                        "seq-imbalance", "seq-rebalanced"),
    Group.EXTRAS: ("slow-worker-1-dp2-pp2", "slow-worker-2-dp2-pp2", "slow-worker-3-dp2-pp2"),
}
DEFAULT_GROUPS = (Group.S6, Group.CLEAN, Group.MITIGATIONS)

# Seconds per run (train + what-if) before any run of this suite is timed here, from runs
# under load 2-13 (so upper bounds): 16 ranks: Ray start + rank launch
# ~40 s and step 0 ~10 s, then ~2.9 s per step with 1024-token microbatches (clean; the
# slow levels x S); 4-rank runs ~12 s of start-up plus their steps (gc 31 x 0.3 s, stage
# 31 x 0.7 s, seq 31 x 0.2 s, clean-dp2-pp2 31 x ~0.75 s).
EST_S = {"clean-dp4-pp4": 110.0, "slow-worker-1": 115.0, "slow-worker-2": 130.0,
         "slow-worker-3": 185.0, "clean-dp2-pp2": 40.0, "gc-pauses": 30.0, "gc-planned": 28.0,
         "stage-imbalance": 40.0, "stage-rebalanced": 40.0, "seq-imbalance": 22.0,
         "seq-rebalanced": 22.0}
EST_DEFAULT_S = 45.0


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """One run of the suite."""

    scenario: str
    """Built-in scenario name."""
    seed: int
    """Training seed (the repeat)."""
    steps: int | None = None
    """Override of run.steps (None: the scenario's own)."""

    def __post_init__(self) -> None:
        if self.seed < 0 or (self.steps is not None and self.steps < 2):
            raise ValueError(f"bad run {self}")

    def folder(self, out: Path) -> Path:
        """OUT/<scenario>/<seed>."""
        return out / self.scenario / str(self.seed)


def plan(groups: list[Group], repeats: int, steps: int | None) -> list[RunSpec]:
    """Runs in order: seed-major, so an interrupted suite has whole repeats of every group."""
    if repeats < 1:
        raise ValueError("--repeats must be >= 1")
    return [RunSpec(scenario=name, seed=seed, steps=steps)
            for seed in range(repeats) for g in groups for name in GROUPS[g]]


def state(folder: Path) -> str:
    """'done', 'trained' (what-if missing) or 'todo'."""
    try:
        record = json.loads((folder / "run.json").read_text())
    except (OSError, ValueError):
        return "todo"
    if record.get("outcome") != "ok" or not (folder / "trace.parquet").exists():
        return "todo"
    return "done" if (folder / "whatif" / "whatif.json").exists() else "trained"


def _uptime() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


class Durations:
    """Per-scenario run times learnt as the suite goes (OUT/.durations.json)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.seen: dict[str, list[float]] = json.loads(path.read_text())
        except (OSError, ValueError):
            self.seen = {}

    def estimate(self, scenario: str) -> float:
        times = self.seen.get(scenario)
        return sum(times) / len(times) if times else EST_S.get(scenario, EST_DEFAULT_S)

    def add(self, scenario: str, seconds: float) -> None:
        self.seen.setdefault(scenario, []).append(round(seconds, 1))
        self.path.write_text(json.dumps(self.seen, indent=1))


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "stragglerlab", *args]


def execute(run: RunSpec, out: Path, log) -> float:
    """Train (unless trained) and analyse one run; returns its wall seconds."""
    folder = run.folder(out)
    t0 = time.perf_counter()
    load_before = _uptime()
    if state(folder) == "todo":
        if folder.exists():  # a killed or failed run: keep it for a look, out of the way
            aside = out / ".partial" / f"{run.scenario}-{run.seed}-{int(time.time())}"
            aside.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(folder), str(aside))
        folder.parent.mkdir(parents=True, exist_ok=True)
        cmd = _cli("train", "--quiet", "--scenario", run.scenario, "--seed", str(run.seed),
                   "--out", str(folder))
        if run.steps is not None:
            cmd += ["--steps", str(run.steps)]
        subprocess.run(cmd, check=True, stdout=log, stderr=log)
    subprocess.run(_cli("whatif", "--quiet", "--run", str(folder)), check=True, stdout=log,
                   stderr=log)
    seconds = time.perf_counter() - t0
    (folder / "fidelity.json").write_text(json.dumps(
        {"wall_s": round(seconds, 1), "loadavg_before": load_before,
         "loadavg_after": _uptime(), "cores": os.cpu_count()}, indent=1))
    return seconds


def _fmt(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def run_suite(runs: list[RunSpec], out: Path, max_runs: int | None) -> int:
    """Execute what is not done yet, with progress; returns the number of failed runs."""
    durations = Durations(out / ".durations.json")
    todo = [r for r in runs if state(r.folder(out)) != "done"]
    print(f"{len(runs)} runs, {len(runs) - len(todo)} already done; {len(todo)} to go, "
          f"estimated {_fmt(sum(durations.estimate(r.scenario) for r in todo))} "
          f"(load average now {_uptime()})", flush=True)
    if max_runs is not None:
        todo = todo[:max_runs]
    failed, t_start = 0, time.perf_counter()
    with open(out / "fidelity.log", "a") as log:
        for i, run in enumerate(todo, 1):
            print(f"[{i}/{len(todo)}] {run.scenario} seed {run.seed} ...", end=" ", flush=True)
            try:
                seconds = execute(run, out, log)
            except subprocess.CalledProcessError as exc:
                failed += 1
                print(f"FAILED (exit {exc.returncode}; see {out / 'fidelity.log'})", flush=True)
                continue
            durations.add(run.scenario, seconds)
            left = sum(durations.estimate(r.scenario) for r in todo[i:])
            print(f"{seconds:.0f}s; elapsed {_fmt(time.perf_counter() - t_start)}, "
                  f"about {_fmt(left)} left (load {_uptime()})", flush=True)
    return failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="results folder (OUT/<scenario>/<seed>/)")
    ap.add_argument("--groups", nargs="+", choices=[g.value for g in Group],
                    default=[g.value for g in DEFAULT_GROUPS], help="parts of the suite to run")
    ap.add_argument("--repeats", type=int, default=3, help="runs per scenario (seeds 0..N-1)")
    ap.add_argument("--steps", type=int, help="override every scenario's run.steps (smoke)")
    ap.add_argument("--max-runs", type=int, help="stop after this many runs (run in pieces)")
    ap.add_argument("--plan", action="store_true", help="print the runs and the estimate only")
    ap.add_argument("--report", action="store_true", help="tables from the runs there only")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = plan([Group(g) for g in args.groups], args.repeats, args.steps)
    if args.plan:
        durations = Durations(out / ".durations.json")
        for r in runs:
            print(f"{r.scenario:<24} seed {r.seed}  {state(r.folder(out)):<8} "
                  f"~{durations.estimate(r.scenario):.0f}s")
        left = sum(durations.estimate(r.scenario) for r in runs
                   if state(r.folder(out)) != "done")
        print(f"{len(runs)} runs; left: about {_fmt(left)} on this machine")
        return 0
    failed = 0 if args.report else run_suite(runs, out, args.max_runs)
    done = [r.folder(out) for r in runs if state(r.folder(out)) == "done"]
    md, doc = build_report(done, out)
    (out / "fidelity.md").write_text(md)
    (out / "fidelity.json").write_text(json.dumps(doc, indent=1))
    print(md)
    print(f"written: {out / 'fidelity.md'}, {out / 'fidelity.json'}, {out / 'figures'}/")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
