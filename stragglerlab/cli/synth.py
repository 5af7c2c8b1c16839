"""`stragglerlab synth`: write a synthetic run folder (a simulated DP x PP job, no training).

    stragglerlab synth --out examples/slow-worker --dp 2 --pp 4 --microbatches 4 --steps 8 \
        --slow 1,1,2.0

Writes `trace.parquet`, `meta.yaml` and `faults.json` (one slow-worker record
per --slow) into --out (required: the run folder it makes) and prints what it
wrote to stdout (with --quiet too): a trace with known stragglers for trying the what-if
analysis and detectors in seconds (stragglerlab/workloads/synthetic.py).

--out must be new, empty, or a folder synth wrote before (its meta.yaml names the job
`synthetic`, as synth names every job) holding nothing but those three files: another
job's trace or records there are refused, never overwritten. A worker slowed by two
--slow in the same steps is refused (its factors would multiply, and faults.json could
not say what each fault measured).
"""

from __future__ import annotations

import argparse

from stragglerlab.cli.common import examples, not_another_run, out_folder
from stragglerlab.trace.trace_checks import MAX_OPS_PER_STEP
from stragglerlab.util.errors import InputError
from stragglerlab.util.folder_lock import lock_folder

MAX_WORKERS = 65_536
"""Largest dp * pp accepted: far past any trace the analysis is benchmarked on."""


def _slow(text: str):
    from stragglerlab.workloads.synthetic import SlowWorker

    parts = text.split(",")
    if not 3 <= len(parts) <= 5:
        raise argparse.ArgumentTypeError(f"--slow wants DP,STAGE,FACTOR[,FIRST[,LAST]], got {text}")
    try:
        dp, stage, factor = int(parts[0]), int(parts[1]), float(parts[2])
        first = int(parts[3]) if len(parts) > 3 else 0
        last = int(parts[4]) if len(parts) > 4 else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"--slow wants numbers, got {text}") from None
    return SlowWorker(dp, stage, factor, first, last)


def add_parser(sub, name: str) -> argparse.ArgumentParser:
    """Register the verb's flags (the CLI root adds --quiet)."""
    p = sub.add_parser(name, help="write a synthetic run folder (simulated job with known faults)",
                       epilog=examples(
                           "stragglerlab synth --out examples/slow-worker --dp 2 --pp 4 "
                           "--slow 1,1,2.0",
                           "stragglerlab synth --out /tmp/clean --steps 20 --seed 3"))
    p.add_argument("--out", required=True, metavar="DIR",
                   help="run folder to write (required); writes trace.parquet, meta.yaml, "
                        "faults.json")
    p.add_argument("--dp", type=int, default=2, help="data-parallel degree")
    p.add_argument("--pp", type=int, default=4, help="pipeline stages")
    p.add_argument("--microbatches", type=int, default=4, help="microbatches per step")
    p.add_argument("--steps", type=int, default=8, help="traced steps")
    p.add_argument("--seed", type=int, default=0, help="noise seed")
    p.add_argument("--jitter", type=float, default=0.02, help="relative duration noise")
    p.add_argument("--last-stage-factor", type=float, default=1.0,
                   help="multiplier on the last stage's compute (stage imbalance)")
    p.add_argument("--slow", type=_slow, action="append", default=[],
                   metavar="DP,STAGE,FACTOR[,FIRST[,LAST]]", help="a slow worker (repeatable)")
    return p


WRITES = ("trace.parquet", "meta.yaml", "faults.json")
"""The files synth writes into --out."""


def _synth_wrote(out) -> bool:
    """Whether the trace files in `out` are an earlier synth's: synth names every job
    `synthetic` (SyntheticConfig.trial_name; no flag changes it), so its meta.yaml is the
    writer's record; a rerun (e.g. regenerating examples/slow-worker) may replace them."""
    from stragglerlab.run.run_folder import read_meta
    from stragglerlab.workloads.synthetic import SyntheticConfig

    try:
        return read_meta(out / "meta.yaml").trial_name == SyntheticConfig.trial_name
    except InputError:  # missing or unreadable: not known to be synth's
        return False


def _one_slow_per_worker(slow, n_steps: int) -> None:
    """Refuse two --slow on one worker whose steps overlap: the factors would multiply
    there and faults.json would record each fault measuring their product."""
    from stragglerlab.workloads.synthetic_config import overlapping_slow_workers

    pair = overlapping_slow_workers(slow, n_steps)
    if pair:
        a, b = pair
        raise InputError(f"--slow {_spec(a)} and --slow {_spec(b)} slow the same worker (DP "
                         f"{a.dp_rank}, PP {a.stage}) in the same steps; give each worker one "
                         "--slow per step range (for both factors at once, one --slow "
                         f"{a.dp_rank},{a.stage},{a.factor * b.factor:g})")


def _spec(w) -> str:
    """A SlowWorker as the --slow text that gives it."""
    tail = "" if w.first_step == 0 and w.last_step is None else f",{w.first_step}"
    tail += "" if w.last_step is None else f",{w.last_step}"
    return f"{w.dp_rank},{w.stage},{w.factor:g}{tail}"


MAX_FACTOR = 1000.0
"""Largest slow-worker or last-stage factor: past it op times leave any trace's range."""
STEP_OPS = 16
"""Room for the ops of a step that are not per microbatch (collectives, optimizer, ...)."""
MAX_JITTER = 10.0
"""Largest relative duration noise (lognormal sigma 10 already spans e^±10)."""


def run(args) -> int:
    """Check the shape, synthesize, write."""
    import math

    from stragglerlab.workloads.synthetic import SyntheticConfig, write_run

    for flag in ("dp", "pp", "microbatches", "steps"):
        if getattr(args, flag) < 1:
            raise InputError(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    if args.dp * args.pp > MAX_WORKERS or args.steps * args.microbatches > 100_000:
        raise InputError(f"--dp x --pp is at most {MAX_WORKERS} and --steps x --microbatches at "
                         "most 100000: a larger synthetic job would not fit in memory")
    # One step of one worker holds at most the readers' limit (trace_checks), so what
    # synth writes its own whatif reads: compute, plus P2P on each side a stage has.
    per_mb = 2 + 2 * min(args.pp - 1, 2)
    most = (MAX_OPS_PER_STEP - STEP_OPS) // per_mb
    if args.microbatches > most:
        raise InputError(f"--microbatches is at most {most:,} with --pp {args.pp} (each adds "
                         f"{per_mb} ops to a worker's step, and a trace holds at most "
                         f"{MAX_OPS_PER_STEP:,} per worker and step), got {args.microbatches:,}")
    if not math.isfinite(args.jitter) or not 0 <= args.jitter <= MAX_JITTER:
        raise InputError(f"--jitter must be a number from 0 to {MAX_JITTER:g}, got "
                         f"{args.jitter}")
    if not math.isfinite(args.last_stage_factor) or \
            not 0 < args.last_stage_factor <= MAX_FACTOR:
        # 0 would write a stage that computes nothing, a trace whatif refuses
        raise InputError(f"--last-stage-factor must be a number above 0 (1: as the other "
                         f"stages) and at most {MAX_FACTOR:g}, got {args.last_stage_factor}")
    for w in args.slow:
        if not (0 <= w.dp_rank < args.dp and 0 <= w.stage < args.pp):
            raise InputError(f"--slow {w.dp_rank},{w.stage},...: the worker is outside "
                             f"DP {args.dp} x PP {args.pp}")
        last = args.steps - 1 if w.last_step is None else w.last_step
        if not 0 <= w.first_step <= last < args.steps:
            raise InputError(f"--slow {w.dp_rank},{w.stage},{w.factor:g},{w.first_step}"
                             f"{'' if w.last_step is None else f',{w.last_step}'}: steps run "
                             f"0..{args.steps - 1}; give 0 <= FIRST <= LAST <= "
                             f"{args.steps - 1}")
        if not (math.isfinite(w.factor) and 1 < w.factor <= MAX_FACTOR):
            # faults.json would record a "slow" worker that is as fast or faster.
            raise InputError(f"--slow factor must be a number above 1 (a slow worker takes "
                             f"longer; 1 is no fault) and at most {MAX_FACTOR:g}, got "
                             f"{w.factor:g}")
    if not 0 <= args.seed < 2**63:  # numpy refuses a negative seed in its own words
        raise InputError(f"--seed must be an integer from 0 to 2**63 - 1, got {args.seed}")
    _one_slow_per_worker(args.slow, args.steps)
    out = not_another_run(out_folder(args.out), WRITES, _synth_wrote, "synth")
    lock_folder(out, "synth")  # one writer of the folder at a time
    cfg = SyntheticConfig(dp_size=args.dp, pp_size=args.pp, n_microbatches=args.microbatches,
                          n_steps=args.steps, seed=args.seed, jitter=args.jitter,
                          slow_workers=tuple(args.slow), last_stage_factor=args.last_stage_factor)
    from stragglerlab.util.atomic import staged_folder

    try:
        with staged_folder(out, owns=WRITES) as tmp:  # all three files or none
            faults = write_run(cfg, tmp)
    except ValueError as e:
        raise InputError(str(e)) from None
    print(f"wrote {out}/trace.parquet, meta.yaml, faults.json ({len(faults)} faults)")
    return 0
