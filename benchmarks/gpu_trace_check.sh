#!/usr/bin/env bash
# Real GPU traces through the general op model, in one pass on a GPU machine:
#  1. plain PyTorch loops of seven host-device kinds (benchmarks/gpu_real_traces.py), each
#     one rank's torch.profiler trace, imported with `import kineto --traces FILE` (the
#     host-device replay): every step's discrepancy;
#  2. gpu_check.sh's jobs traced by torch.profiler too (config/gpu-scenarios.yaml, the
#     *-kineto scenarios): our what-if on our trace, and the same run's Kineto files
#     imported by the general op model and by ours (--op-model general / vocabulary).
# The traces come back under $OUT (real-traces.tgz, one <scenario>.tgz per job) with the log.
# Numbers: docs/unannotated.md, "Real GPU traces". From the repository root:
#   OUT=results/gpu-trace-check bash benchmarks/gpu_trace_check.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
PY=${PY:-python3}
CFG=${CFG:-config/gpu-scenarios.yaml}
OUT=${OUT:-/tmp/gpu-trace-check}
W=${WORK:-/tmp/gpu-trace-work}
SCENARIOS=${SCENARIOS:-gpu-dp1-pp1-kineto gpu-dp2-pp2-kineto gpu-slow-dp2-pp2-kineto}
mkdir -p "$OUT" "$W"
part() { echo "=== $1 ($(date +%T))"; }
part env
nvidia-smi -L 2>/dev/null
$PY -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__,
'CUDA', torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else '')"
part "plain PyTorch loops"
$PY benchmarks/gpu_real_traces.py --out "$W/real" --steps "${STEPS:-6}" --json "$OUT/host-times.json" \
    ${DEVICE:+--device $DEVICE} 2>&1 | grep -v "^USDT\|^STAGE:"
for f in "$W"/real/*.json.gz; do
  k=$(basename "$f" -rank0.json.gz)
  part "import $k"
  $PY -m stragglerlab import kineto --quiet --traces "$f" --out "$W/imp-$k" 2>&1
done
tar czf "$OUT/real-traces.tgz" -C "$W" real
for sc in $SCENARIOS; do
  r=$W/runs/$sc
  part "$sc: train"
  $PY -m stragglerlab train --quiet --launcher local --config "$CFG" --scenario "$sc" \
      --out "$r" --overwrite 2>&1 | tail -3
  part "$sc: what-if on our trace"
  $PY -m stragglerlab whatif --quiet --run "$r" 2>&1 | grep -E "slowdown S|step time|discrepancy|VERDICT"
  for m in general vocabulary; do
    part "$sc: import kineto --op-model $m"
    $PY -m stragglerlab import kineto --quiet --op-model $m --traces "$r/kineto" \
        --out "$r/import-$m" 2>&1 | head -40
  done
  $PY -m stragglerlab whatif --quiet --run "$r/import-vocabulary" 2>&1 \
      | grep -E "slowdown S|step time|discrepancy|VERDICT"
  $PY -m stragglerlab detect --quiet --detector whatif --run "$r" 2>&1 | grep -v "^  noise floor"
  tar czf "$OUT/$sc.tgz" -C "$W" $(cd "$W" && ls -d runs/$sc/kineto runs/$sc/*.json \
      runs/$sc/meta.yaml runs/$sc/import-*/*.json runs/$sc/whatif/whatif.json 2>/dev/null)
done
part done
