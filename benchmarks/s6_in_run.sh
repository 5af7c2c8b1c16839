#!/bin/bash
# §6 with the in-run control (figures/s6_control.py): slow-worker-1..3 (DP 4 x PP 4, the slow
# worker from step 6 after four clean traced steps), fresh seeds, each run trained once and
# analysed once, then the §6 table. Runs seed by seed, levels inside, so a run cut short by
# a time limit still has every level of its first seeds.
#
#   benchmarks/s6_in_run.sh OUT [SEED ...]        # default seeds 41 42 43
#   BUDGET_S=370 benchmarks/s6_in_run.sh OUT      # start no run after 370 s
#
# SL is the CLI (default: stragglerlab on PATH; from a bare checkout: "python3 -m stragglerlab"
# with PYTHONPATH=checkout). On a machine with GPUs, CUDA_VISIBLE_DEVICES="" keeps it on gloo.
# Writes OUT/runs/slow-worker-<L>/<seed>/, OUT/s6.log and OUT/table/table_s6.{json,png,pdf}.
set -u
out=${1:?usage: s6_in_run.sh OUT [SEED ...]}; shift
seeds=${*:-41 42 43}
SL=${SL:-stragglerlab}
t0=$(date +%s)
mkdir -p "$out/runs"
for s in $seeds; do
  for level in 1 2 3; do
    if [ $(( $(date +%s) - t0 )) -gt "${BUDGET_S:-1000000}" ]; then
      echo "time budget spent: stopped before seed $s level $level" | tee -a "$out/s6.log"
      break 2
    fi
    d=$out/runs/slow-worker-$level/$s
    t=$(date +%s)
    $SL train --scenario "slow-worker-$level" --seed "$s" --out "$d" --quiet >>"$out/s6.log" 2>&1
    rc=$?
    $SL whatif --run "$d" --quiet >>"$out/s6.log" 2>&1
    echo "slow-worker-$level/$s: train rc=$rc, whatif rc=$?, $(( $(date +%s) - t )) s" | tee -a "$out/s6.log"
  done
done
$SL figures --runs "$out"/runs/*/* --only table_s6 --out "$out/table" --quiet >>"$out/s6.log" 2>&1
python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['ours'].get('markdown', 'no table'))" \
  "$out/table/table_s6.json"
