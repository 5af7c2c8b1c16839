#!/usr/bin/env bash
# The torch-wrapper workloads on a many-core machine's CPUs (gloo through
# benchmarks/torch-gloo.yaml, `--launcher local`: no Ray there), one seed at a time until
# BUDGET_S has passed: benchmarks/torch_workloads.py's rows (clean S, the slow run's
# in-run numbers). The run folders' records come back under $OUT/runs (numbers:
# docs/torch-workloads.md, "On a 16-core machine"). From the repository root:
#   BUDGET_S=300 bash benchmarks/torch_cpu_check.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PY:-python3}
OUT=${OUT:-/tmp/torch-cpu-check}
ls .whl/*.whl >/dev/null 2>&1 && $PY -m pip install -q --no-deps .whl/*.whl 2>&1 | tail -1
nproc; $PY -c "import torch, sys; print(sys.version.split()[0], torch.__version__)"
uptime
END=$(( $(date +%s) + ${BUDGET_S:-330} ))
for seed in 0 1 2; do
  [ "$(date +%s)" -lt "$END" ] || break
  echo "=== seed $seed $(date +%T)"
  $PY benchmarks/torch_workloads.py --launcher local --config benchmarks/torch-gloo.yaml \
      --seeds $seed --out /tmp/tw --json "$OUT/torch-seed$seed.json" 2>&1 | tail -4
  uptime
done
for d in /tmp/tw/*; do
  mkdir -p "$OUT/runs/$(basename "$d")"
  cp "$d/run.json" "$d/faults.json" "$d/import/whatif.json" "$OUT/runs/$(basename "$d")/" \
      2>/dev/null
done
echo done "$(date +%T)"
